package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// Config is how to reach the broker, which delay topology to use, and how the Publisher
// behaves. The rest of the topology (targets, buckets, ladder, plugin mode, shards) is what
// `rabbitdelay apply` recorded in the broker for Prefix (the stream <prefix>.spec), which every
// client reads when it connects. The zero value dials amqp://guest:guest@localhost:5672/ with
// prefix "rabbitdelay", and every other zero field takes its default. [ConfigFromEnv] fills
// URL, the TLS files and Prefix. [NewPublisher] refuses a field it cannot use with an error
// wrapping ErrInvalidConfig that names the field, and reports every such field at once. The
// packages consumer, revoke and schedule read only URL, the TLS files and Prefix. JSON encodes
// the plain fields only (Management, OnReconnect, Logger and Metrics are left out).
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

	// Strategy is how the Publisher chooses between the ladder and the plugin (see [Strategy]
	// and the package documentation). The zero value is [Auto]; a value other than the four
	// strategies: ErrInvalidConfig.
	Strategy Strategy
	// Channels is how many AMQP channels the Publisher spreads its publishes over, round
	// robin. 0: [DefaultChannels]; else 1 to 64. Each channel pipelines its publishes in
	// confirm mode, so one already serves many goroutines; more let the broker process them in
	// parallel (one Erlang process per channel). Besides them the Publisher opens one channel
	// for publishes the broker may refuse and one at a time for the checks before a publish
	// (NewPublisher fails with ErrInvalidConfig when channel_max is below Channels+2), and,
	// as far as channel_max leaves room, one for direct publishes and one for the plugin path,
	// so that a 404 or 403 the broker answers by closing a channel costs no other publish its
	// confirm.
	Channels int
	// MaxMessageSize is the largest message body, in bytes, that Publish sends; a larger body
	// gets ErrInvalidInput and nothing is sent. Set it to the broker's max_message_size.
	// 0: [DefaultMaxMessageSize]; else 1 to [MaxMessageSizeLimit]. Every hop of a delayed
	// message writes its body to a quorum queue's log again, so keep delayed bodies small.
	MaxMessageSize int
	// MaxInFlight is how many publishes started by [Publisher.PublishDeferred] may wait for
	// their confirms at once; PublishDeferred blocks while that many are outstanding
	// (publishes made with Publish are not counted). 0: [DefaultMaxInFlight]; else at least 1.
	MaxInFlight int

	// Management gives the Publisher the broker's management API (a *topology.Management for
	// the vhost of URL), so that NewPublisher and every reconnection check what AMQP cannot
	// see: that the dispatch exchange is bound to every target now, that no policy or operator
	// policy in effect on the topology breaks a guarantee, and which exchanges carry a topic
	// permission (see [ManagementCheck]). nil: no management API. One that reads another
	// vhost than URL's: ErrInvalidConfig.
	Management ManagementCheck `json:"-"`

	// ConnectionName is the name of the Publisher's connection in the management UI.
	// "": "rabbitdelay-publisher".
	ConnectionName string
	// ReconnectMin and ReconnectMax bound the exponential back-off between reconnection
	// attempts: the first wait is about ReconnectMin, each next one doubles, up to about
	// ReconnectMax; every wait is randomized by ±50 %. 0: 100 ms and 5 s (ReconnectMax: at
	// least ReconnectMin); else 0 < ReconnectMin <= ReconnectMax <= [MaxReconnectBackoff].
	ReconnectMin, ReconnectMax time.Duration
	// OnReconnect, when set, is called on every connection event (lost, re-established,
	// attempt failed). It runs on the Publisher's reconnecting goroutine: it must return
	// quickly and must not call [Publisher.Close]. It is not called once Close has begun.
	OnReconnect func(ReconnectEvent) `json:"-"`
	// Logger receives the Publisher's logs: connection, reconnection and probe events at info
	// and warn level, never a message body, header or password. The zero Logger logs nothing;
	// the Publisher never uses the global logger.
	Logger zerolog.Logger `json:"-"`
	// Metrics, when set, is the Prometheus registry the Publisher registers its metrics on
	// (never the global one); Close unregisters them. A registry that already has these names:
	// ErrInvalidConfig (give each Publisher its own label with prometheus.WrapRegistererWith).
	//
	//   - rabbitdelay_publisher_publishes_total{path,outcome}: every Publish and PublishAt
	//     call; path is direct, bucket, ladder, plugin or none (refused before a path was
	//     chosen); outcome is confirmed, nacked (ErrNacked), unroutable (ErrUnroutable),
	//     invalid (refused before sending), refused (ErrAccessRefused, ErrExchangeNotFound),
	//     lost (ErrConnectionLost), canceled (the context ended), closed (ErrClosed) or failed.
	//   - rabbitdelay_publisher_confirm_duration_seconds{path}: time until the broker's confirm.
	//   - rabbitdelay_publisher_publishes_in_flight, rabbitdelay_publisher_disconnects_total,
	//     rabbitdelay_publisher_reconnects_total, rabbitdelay_publisher_reconnect_failures_total.
	//   - rabbitdelay_publisher_plugin_available: 1 while the plugin exchange is in use.
	//   - rabbitdelay_revocations_total{outcome}: message ids given to Revoke and Reschedule.
	Metrics prometheus.Registerer `json:"-"`

	// extraTargets are exchanges beside the spec record's targets (pubhook.ExtraTargets).
	extraTargets []string
}

// conn returns the connection part of c in the form the internal dialer takes.
func (c Config) conn() amqpconn.Config {
	return amqpconn.Config{URL: c.URL, TLSCA: c.TLSCA, TLSCert: c.TLSCert, TLSKey: c.TLSKey}
}

// ConfigFromEnv reads AMQPDELAY_URL, AMQPDELAY_TLS_CA, AMQPDELAY_TLS_CERT, AMQPDELAY_TLS_KEY
// and AMQPDELAY_PREFIX, as the rabbitdelay CLI does, into a Config whose other fields are zero;
// the topology's other variables are the CLI's alone. Its error is nil: [NewPublisher]
// validates the values.
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

// check resolves cfg's options and returns them, or an error wrapping ErrInvalidConfig that
// names every field it cannot use.
func (cfg Config) check() (options, error) {
	o, err := cfg.resolve()
	errs := []error{err}
	if err := delayspec.ValidatePrefix(cfg.Prefix); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	if err := cfg.conn().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	if o.management != nil {
		if have, want := o.management.VHost(), vhostOf(cfg.conn().URLOrDefault()); have != want {
			errs = append(errs, fmt.Errorf("%w: Config.Management reads vhost %q, but Config.URL names vhost %q: "+
				"give the management check the URL's vhost (topology.NewManagement(url, %q))", ErrInvalidConfig, have, want, want))
		}
	}
	return o, errors.Join(errs...)
}
