// Package amqpconn dials RabbitMQ for the CLI and the amqpdelay client from one configuration
// (AMQPDELAY_URL, AMQPDELAY_TLS_*), and names URLs only in their redacted form ([Redact]).
package amqpconn

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultURL is the broker URL when none is configured (guest works from loopback only).
const DefaultURL = "amqp://guest:guest@localhost:5672/"

// Config says where the broker is (https://www.rabbitmq.com/docs/uri-spec); the zero value
// dials DefaultURL.
type Config struct {
	// URL is an amqp:// or amqps:// URL, or a comma-separated list of one cluster's (same user
	// and vhost; a comma in a password as %2C), dialed in a random order. Empty: DefaultURL.
	URL string
	// TLSCA is a PEM file of CA certificates (amqps:// only); empty: the system roots.
	TLSCA string
	// TLSCert and TLSKey are PEM files of a client certificate and its key: both or neither.
	TLSCert, TLSKey string
}

// ErrConfig is wrapped by every error about the configuration itself.
var ErrConfig = errors.New("amqpconn: invalid connection configuration")

// URLOrDefault returns the first URL of [Config.URLs], whose user and vhost all share.
func (c Config) URLOrDefault() string { return c.URLs()[0] }

// URLs returns c.URL's address list, trimmed, empty entries dropped; [DefaultURL] when none.
func (c Config) URLs() []string {
	var out []string
	for _, u := range strings.Split(c.URL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		return []string{DefaultURL}
	}
	return out
}

// Redacted returns c.URL's address list with every password replaced by "***".
func (c Config) Redacted() string {
	urls := c.URLs()
	for i, u := range urls {
		urls[i] = Redact(u)
	}
	return strings.Join(urls, ",")
}

// Validate checks the URL and the TLS files offline; every problem is joined, each wrapping
// ErrConfig. A bad URL is named by [Redact], never by the parser's message, which quotes it.
func (c Config) Validate() error {
	var errs []error
	var first amqp.URI
	badURL := false
	for i, raw := range c.URLs() {
		u, err := amqp.ParseURI(raw)
		if err != nil || MisplacedAt(raw) {
			errs = append(errs, urlError(raw))
			badURL = true
			continue
		}
		if i == 0 {
			first = u
			continue
		}
		if first.Scheme == "" { // the first URL is bad: nothing to compare with
			continue
		}
		if u.Vhost != first.Vhost || u.Username != first.Username || u.Scheme != first.Scheme {
			errs = append(errs, fmt.Errorf("%w: URL %q of the address list differs from the first, %q, in its user name, vhost or scheme: "+
				"the URLs of a list name the nodes of one cluster, with one user and one vhost", ErrConfig, Redact(raw), Redact(c.URLOrDefault())))
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, fmt.Errorf("%w: TLS client certificate and key go together: set both AMQPDELAY_TLS_CERT and AMQPDELAY_TLS_KEY (--tls-cert, --tls-key), or neither", ErrConfig))
	}
	if !badURL && first.Scheme != "amqps" && (c.TLSCA != "" || c.TLSCert != "") {
		errs = append(errs, fmt.Errorf("%w: TLS files are set (AMQPDELAY_TLS_*) but the URL scheme (AMQPDELAY_URL, --url) is %q: use amqps://", ErrConfig, first.Scheme))
	}
	for _, f := range []struct{ name, path string }{{"AMQPDELAY_TLS_CA (--tls-ca)", c.TLSCA}, {"AMQPDELAY_TLS_CERT (--tls-cert)", c.TLSCert}, {"AMQPDELAY_TLS_KEY (--tls-key)", c.TLSKey}} {
		if _, err := os.Stat(f.path); f.path != "" && err != nil {
			errs = append(errs, fmt.Errorf("%w: %s file: %v", ErrConfig, f.name, err))
		}
	}
	if len(errs) == 0 && first.Scheme == "amqps" { // files that exist but hold no PEM or no key pair
		if _, err := c.tlsConfig(c.URLs()[0]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

const urlHelp = `want "amqp://" or "amqps://", then user:password@host:port/vhost; percent-encode special ` +
	`characters such as # ? / @ : %% and space in the user name and password (%%23 for #, %%3F for ?, %%2F for /, ` +
	`%%40 for @, %%3A for :, %%25 for %%, %%20 for space)`

// urlError reports an invalid URL without any part of its user information.
func urlError(raw string) error {
	i := strings.Index(raw, "://")
	if i < 0 {
		return fmt.Errorf("%w: URL (AMQPDELAY_URL, --url) is not a valid amqp URL: it has no scheme; "+urlHelp, ErrConfig)
	}
	shown := Redact(raw)
	if scheme := raw[:i]; scheme != "amqp" && scheme != "amqps" && schemeRE.MatchString(scheme) {
		return fmt.Errorf("%w: URL %q (AMQPDELAY_URL, --url): scheme %q: want \"amqp://\" or \"amqps://\"", ErrConfig, shown, scheme)
	}
	return fmt.Errorf("%w: URL %q (AMQPDELAY_URL, --url) is not a valid amqp URL: "+urlHelp, ErrConfig, shown)
}

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// MisplacedAt reports whether an '@' of raw lies after its host: an unescaped # ? or / in the
// password cut it short (amqp://user:pa/ss@host would dial host "user"), or the path holds one
// (write %40).
func MisplacedAt(raw string) bool {
	_, rest, _ := strings.Cut(raw, "://") // none: rest is "", no '@'
	at, end := strings.LastIndexByte(rest, '@'), strings.IndexAny(rest, "/?#")
	return at >= 0 && end >= 0 && end < at
}

// tlsConfig builds the TLS configuration for raw's host (nil, nil for amqp://). Errors wrap
// [ErrConfig]: an unreadable CA file or one without PEM, a key pair that fails.
func (c Config) tlsConfig(raw string) (*tls.Config, error) {
	u, err := amqp.ParseURI(raw)
	if err != nil || u.Scheme != "amqps" {
		return nil, nil
	}
	tc := &tls.Config{ServerName: u.Host, MinVersion: tls.VersionTLS12}
	if c.TLSCA != "" {
		pem, err := os.ReadFile(c.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("%w: AMQPDELAY_TLS_CA (--tls-ca): %v", ErrConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: AMQPDELAY_TLS_CA (--tls-ca) %s holds no PEM certificate", ErrConfig, c.TLSCA)
		}
		tc.RootCAs = pool
	}
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("%w: AMQPDELAY_TLS_CERT/AMQPDELAY_TLS_KEY (--tls-cert, --tls-key): %v", ErrConfig, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Dial opens a connection named name to the first of c's URLs, in a random order, that
// accepts it. ctx bounds the dial (30 s without a deadline), each URL getting an even share of
// the rest. Errors name URLs by [Redact]; a broker refusal is reachable as *amqp091.Error.
func Dial(ctx context.Context, c Config, name string) (*amqp.Connection, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrConfig)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	urls := c.URLs()
	rand.Shuffle(len(urls), func(i, j int) { urls[i], urls[j] = urls[j], urls[i] })
	var errs []error
	for i, u := range urls {
		share := time.Until(deadline) / time.Duration(len(urls)-i)
		conn, err := dialOne(ctx, c, u, name, time.Now().Add(share))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if strings.TrimSpace(c.URL) == "" { // DefaultURL alone was tried
		return nil, fmt.Errorf("%w (no broker URL was set, so RabbitMQ's default %s was tried: set AMQPDELAY_URL, "+
			"or the configuration's URL, to your broker's)", errs[0], Redact(DefaultURL))
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, fmt.Errorf("no node of the address list answered (%d URLs): %w", len(urls), errors.Join(errs...))
}

func dialOne(ctx context.Context, c Config, raw, name string, deadline time.Time) (*amqp.Connection, error) {
	tc, err := c.tlsConfig(raw)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	cfg := amqp.Config{
		Properties:      props,
		TLSClientConfig: tc,
		Heartbeat:       10 * time.Second,
		Locale:          "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Deadline: deadline}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The handshake too; amqp091 clears the deadline after it.
			if err := conn.SetDeadline(deadline); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		},
	}
	type result struct {
		conn *amqp.Connection
		err  error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := amqp.DialConfig(raw, cfg)
		done <- result{conn, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			// amqp091's dial errors name the host and port, never the URL.
			return nil, fmt.Errorf("connect to %q: %w", Redact(raw), r.err)
		}
		return r.conn, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("connect to %q: %w", Redact(raw), ctx.Err())
	}
}

// Redact returns raw without its password (amqp://user:***@host:5672/vhost), the values of
// query parameters amqp091-go does not read and a fragment as "***". A URL that does not parse,
// or that [MisplacedAt] reports, is shown by [RedactUserinfo].
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || MisplacedAt(raw) || u.Opaque != "" {
		return RedactUserinfo(raw)
	}
	if u.RawQuery == "" && u.Fragment == "" && u.User == nil {
		return raw // no user information, query or fragment, so no password
	}
	u.RawQuery = redactQuery(u.RawQuery)
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = "***", ""
	}
	return strings.Replace(u.Redacted(), ":xxxxx@", ":***@", 1) // Redacted writes "xxxxx"
}

// redactTail returns s, the host on, with its query redacted and its fragment as "***".
func redactTail(s string) string {
	s, frag, hasFrag := strings.Cut(s, "#")
	if hasFrag && frag != "" {
		frag = "#***"
	} else if hasFrag {
		frag = "#"
	}
	if before, q, ok := strings.Cut(s, "?"); ok {
		s = before + "?" + redactQuery(q)
	}
	return s + frag
}

// uriParams are the query parameters amqp091-go reads: settings, not secrets.
var uriParams = map[string]bool{
	"heartbeat": true, "connection_timeout": true, "channel_max": true, "frame_max": true,
	"auth_mechanism": true, "certfile": true, "keyfile": true, "cacertfile": true,
	"server_name_indication": true,
}

// redactQuery replaces in q the value of every parameter not in uriParams, and every part that
// is no key=value pair, by "***".
func redactQuery(q string) string {
	if q == "" {
		return ""
	}
	parts := strings.Split(q, "&")
	for i, part := range parts {
		rawKey, _, hasValue := strings.Cut(part, "=")
		key, err := url.QueryUnescape(rawKey)
		switch {
		case err != nil || !hasValue:
			parts[i] = "***"
		case !uriParams[key]:
			parts[i] = rawKey + "=***"
		}
	}
	return strings.Join(parts, "&")
}

// RedactUserinfo shows raw, which may not parse, with everything before its host replaced by
// "***" (amqp://***@host:5672/vhost). Without an '@' it shows what precedes the first ':'
// after "://" (what follows may be a password), without "://" only what follows the last '@'.
func RedactUserinfo(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		scheme, rest = "", raw
	} else {
		scheme += "://"
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		return scheme + "***" + redactTail(rest[at:])
	}
	if !ok {
		return "***"
	}
	if host, _, cut := strings.Cut(rest, ":"); cut {
		return scheme + host + ":***"
	}
	return scheme + redactTail(rest)
}

// The Publisher's and the Consumer's reconnect back-off: defaults and the largest maximum (±50 %
// around a much larger one overflows time.Duration).
const (
	DefaultReconnectMin = 100 * time.Millisecond
	DefaultReconnectMax = 5 * time.Second
	MaxReconnect        = time.Hour
)

// ReconnectRange resolves the back-off bounds lo and hi of owner ("Config", "Options"; 0: the
// default) and checks 0 < lo <= hi <= MaxReconnect; the caller wraps the error.
func ReconnectRange(owner string, lo, hi time.Duration) (time.Duration, time.Duration, error) {
	rmin := cmp.Or(lo, DefaultReconnectMin)
	rmax := cmp.Or(hi, max(DefaultReconnectMax, rmin))
	if rmin <= 0 || rmax < rmin || rmax > MaxReconnect {
		return 0, 0, fmt.Errorf("%[1]s.ReconnectMin %[2]v, %[1]s.ReconnectMax %[3]v: want 0 < ReconnectMin <= ReconnectMax <= %[4]v (0: the defaults %[5]v and %[6]v)",
			owner, lo, hi, MaxReconnect, DefaultReconnectMin, DefaultReconnectMax)
	}
	return rmin, rmax, nil
}

// Sleep waits d and reports true, or returns false as soon as ctx ends.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// IsNotFound reports whether err wraps the broker's 404 NOT_FOUND.
func IsNotFound(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.NotFound
}

// NewBackOff returns an exponential back-off from lo to hi by mult, each wait randomized by
// ±50 % (so that clients do not dial in step), without an end.
func NewBackOff(lo, hi time.Duration, mult float64) *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.Multiplier, b.RandomizationFactor, b.MaxElapsedTime = lo, hi, mult, 0.5, 0
	b.Reset()
	return b
}

// CloseReason returns the close reason closed holds, or receives within wait (0: none), else dflt.
func CloseReason(closed <-chan *amqp.Error, wait time.Duration, dflt error) error {
	var e *amqp.Error
	if wait <= 0 {
		select {
		case e = <-closed:
		default:
		}
	} else {
		select {
		case e = <-closed:
		case <-time.After(wait):
		}
	}
	if e != nil {
		return e
	}
	return dflt
}

// Close closes conn, giving the broker up to 5 s to answer (amqp091's Close waits without bound).
func Close(conn *amqp.Connection) error { return conn.CloseDeadline(time.Now().Add(5 * time.Second)) }
