package admin

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/pluginprobe"
)

// DialFunc opens a new connection to the broker; ProbePlugin closes what it returns.
type DialFunc = pluginprobe.Dialer

// ProbePlugin reports whether the broker has the delayed-message plugin, with
// [pluginprobe.Probe] on a connection of its own: it declares and deletes a temporary
// x-delayed-message exchange "<prefix>.plugin-probe.<random>" (without the plugin 3.x closes
// the connection with 503, 4.x the channel with 406: both are false, nil). Errors are
// ErrAccessRefused (no configure permission) or the dial error; it returns when ctx ends.
func ProbePlugin(ctx context.Context, dial DialFunc, prefix string) (bool, error) {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := prefixOf(delayspec.Names{Prefix: prefix}) + ".plugin-probe." + hex.EncodeToString(rnd[:])
	ok, err := pluginprobe.Probe(ctx, dial, name)
	if err != nil && code(err) != 0 {
		return false, wrapBroker(err, fmt.Sprintf("plugin probe: declare exchange %q of type %s", name, PluginExchangeType))
	}
	if err != nil {
		return false, fmt.Errorf("topology: plugin probe: %w", err)
	}
	return ok, nil
}

// ProbePluginManagement reports whether the management API lists the plugin's exchange type;
// it declares nothing, so it suits read-only users.
func ProbePluginManagement(ctx context.Context, m *Management) (bool, error) {
	var raw struct {
		ExchangeTypes []struct{ Name string } `json:"exchange_types"`
	}
	if err := m.get(ctx, "api/overview", &raw); err != nil {
		return false, err
	}
	return slices.ContainsFunc(raw.ExchangeTypes, func(t struct{ Name string }) bool { return t.Name == PluginExchangeType }), nil
}

// prefixOf is n's prefix, delayspec.DefaultPrefix when empty.
func prefixOf(n delayspec.Names) string {
	return cmp.Or(n.Prefix, delayspec.DefaultPrefix)
}
