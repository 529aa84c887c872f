package amqpdelay

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/delayspec"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
)

// Config is the Publisher's configuration: how to reach the broker and the delay topology it
// publishes into. The zero value dials amqp://guest:guest@localhost:5672/ with the default
// topology (which has no targets: set at least Spec.Targets). [ConfigFromEnv] fills it from
// the AMQPDELAY_* variables, exactly as the rabbitdelay CLI reads them, so one set of variables
// serves both.
type Config struct {
	// URL is an amqp:// or amqps:// URL (user:password@host:port/vhost; the vhost is the
	// path, https://www.rabbitmq.com/docs/uri-spec), or the comma-separated URLs of one
	// cluster's nodes (an address list: same user name and vhost; percent-encode a comma in a
	// password as %2C). The Publisher dials them in a random order and, after a connection
	// loss, dials the whole list again. Empty means amqp://guest:guest@localhost:5672/.
	// AMQPDELAY_URL.
	URL string
	// TLSCA is a PEM file of CA certificates to verify the broker with (amqps:// only); empty
	// means the system roots. AMQPDELAY_TLS_CA.
	TLSCA string
	// TLSCert and TLSKey are PEM files of a client certificate and its key, for brokers that
	// require one (amqps:// only): both or neither. AMQPDELAY_TLS_CERT, AMQPDELAY_TLS_KEY.
	TLSCert, TLSKey string
	// Spec is the delay topology, as `rabbitdelay apply` declared it (prefix, targets, buckets,
	// ladder, plugin mode, queue type, shards of the ladder): the Publisher checks at start that
	// the broker has it.
	Spec delayspec.Spec
}

// conn returns the connection part of c in the form the internal dialer takes.
func (c Config) conn() amqpconn.Config {
	return amqpconn.Config{URL: c.URL, TLSCA: c.TLSCA, TLSCert: c.TLSCert, TLSKey: c.TLSKey}
}

// ConfigFromEnv reads the AMQPDELAY_* variables, exactly as the rabbitdelay CLI does (see
// delayspec.ConfigFromEnv). It returns an error wrapping delayspec.ErrInvalidSpec that names a
// variable that does not parse; [NewPublisher] validates the values.
func ConfigFromEnv() (Config, error) {
	c, err := delayspec.ConfigFromEnv()
	return Config{URL: c.URL, TLSCA: c.TLSCA, TLSCert: c.TLSCert, TLSKey: c.TLSKey, Spec: c.Spec}, err
}

// Dial opens a connection to the broker of c, with the settings the Publisher uses (the
// address list tried in a random order, the TLS files, a 10 s heartbeat), named name in the
// management UI: for the consumers and other clients of an application that publishes with
// rabbitdelay. ctx bounds the whole dial (30 s when it has no deadline). The caller owns the
// connection and closes it. Errors wrap ErrInvalidConfig for a configuration that does not
// validate; the others are the dial's (never holding a password; a broker refusal reachable
// as *amqp091.Error).
func Dial(ctx context.Context, c Config, name string) (*amqp.Connection, error) {
	if err := c.conn().Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return amqpconn.Dial(ctx, c.conn(), name)
}
