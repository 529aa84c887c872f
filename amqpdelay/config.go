package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"os"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// Config is how to reach the broker and which delay topology to use: a URL and a prefix. The
// rest of the topology (targets, buckets, ladder, plugin mode, shards) is what `rabbitdelay
// apply` recorded in the broker for that prefix (the stream <prefix>.spec), which every client
// reads when it connects. The zero value dials amqp://guest:guest@localhost:5672/ with prefix
// "rabbitdelay". [ConfigFromEnv] fills it from AMQPDELAY_URL, AMQPDELAY_TLS_* and
// AMQPDELAY_PREFIX.
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
	// Prefix names the delay topology, as given to `rabbitdelay apply`; empty means
	// "rabbitdelay". AMQPDELAY_PREFIX.
	Prefix string
}

// conn returns the connection part of c in the form the internal dialer takes.
func (c Config) conn() amqpconn.Config {
	return amqpconn.Config{URL: c.URL, TLSCA: c.TLSCA, TLSCert: c.TLSCert, TLSKey: c.TLSKey}
}

// ConfigFromEnv reads AMQPDELAY_URL, AMQPDELAY_TLS_CA, AMQPDELAY_TLS_CERT, AMQPDELAY_TLS_KEY
// and AMQPDELAY_PREFIX, as the rabbitdelay CLI does; the topology's other variables are the
// CLI's alone. It never fails today; [NewPublisher] validates the values.
func ConfigFromEnv() (Config, error) {
	return Config{URL: os.Getenv("AMQPDELAY_URL"), TLSCA: os.Getenv("AMQPDELAY_TLS_CA"), TLSCert: os.Getenv("AMQPDELAY_TLS_CERT"),
		TLSKey: os.Getenv("AMQPDELAY_TLS_KEY"), Prefix: os.Getenv("AMQPDELAY_PREFIX")}, nil
}

// readSpec reads the spec record of c's prefix on conn (see delayspec.ReadRecord), wrapping
// ErrTopologyMissing when there is none or it is not one this version reads (apply fixes both).
func (c Config) readSpec(ctx context.Context, conn *amqp.Connection) (delayspec.Spec, error) {
	s, err := delayspec.ReadRecord(ctx, conn, c.Prefix)
	if errors.Is(err, delayspec.ErrNoRecord) || errors.Is(err, delayspec.ErrInvalidSpec) {
		return s, fmt.Errorf("%w: %w", ErrTopologyMissing, err)
	}
	if err != nil {
		return s, fmt.Errorf("amqpdelay: %w", err)
	}
	return s, nil
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
