package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/pluginprobe"
)

// DialFunc opens a new connection to the broker (see the amqpconn-based dialer of the
// rabbitdelay CLI). ProbePlugin owns and closes what it returns.
type DialFunc = pluginprobe.Dialer

// ProbePlugin reports whether the broker has the delayed-message plugin
// (rabbitmq_delayed_message_exchange), with [pluginprobe.Probe] on a connection of its own: it
// declares a temporary exchange of type x-delayed-message named
// "<prefix>.plugin-probe.<random>" and deletes it again. Without the plugin RabbitMQ 3.x
// closes the whole connection (503) and 4.x the channel (406); both answer (false, nil).
//
// It returns (true, nil) when the plugin is there, and an error otherwise: ErrAccessRefused
// when the user may not declare exchanges named after the prefix (no configure permission),
// or the dial error. It returns when ctx ends.
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

// ProbePluginManagement reports whether the broker has the delayed-message plugin from the
// exchange types the management API lists; it declares nothing, so it suits read-only users.
func ProbePluginManagement(ctx context.Context, m *Management) (bool, error) {
	var raw struct {
		ExchangeTypes []struct{ Name string } `json:"exchange_types"`
	}
	if err := m.get(ctx, "api/overview", &raw); err != nil {
		return false, err
	}
	for _, t := range raw.ExchangeTypes {
		if t.Name == PluginExchangeType {
			return true, nil
		}
	}
	return false, nil
}

// prefixOf is n's prefix, delayspec.DefaultPrefix when empty.
func prefixOf(n delayspec.Names) string {
	if n.Prefix == "" {
		return delayspec.DefaultPrefix
	}
	return n.Prefix
}
