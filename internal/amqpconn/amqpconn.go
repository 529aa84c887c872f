// Package amqpconn dials RabbitMQ for the rabbitdelay CLI and the amqpdelay client from one
// configuration shape (the AMQPDELAY_URL and AMQPDELAY_TLS_* variables, read by
// delayspec.ReadEnv), and shows URLs without their passwords ([Redact]): every message of this
// package that names a URL is built from the redacted form, never from the URL as given.
package amqpconn

import (
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

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultURL is the broker URL used when none is configured: a local broker with RabbitMQ's
// default guest user, which RabbitMQ only accepts from loopback.
const DefaultURL = "amqp://guest:guest@localhost:5672/"

// Config says where the broker is and how to reach it. The zero value dials DefaultURL.
// The vhost comes from the URL path (https://www.rabbitmq.com/docs/uri-spec).
type Config struct {
	// URL is an amqp:// or amqps:// URL, or several URLs of one cluster separated by commas
	// (an address list: each with its own credentials, all with the same user name and vhost;
	// percent-encode a comma in a password as %2C). Dial tries them in a random order, so that
	// many clients spread over the nodes, and a client that loses its connection dials again
	// through the whole list. Empty means DefaultURL. AMQPDELAY_URL.
	URL string
	// TLSCA is a PEM file of CA certificates to verify the broker with (amqps:// only).
	// Empty means the system roots. AMQPDELAY_TLS_CA.
	TLSCA string
	// TLSCert and TLSKey are PEM files of a client certificate and its key, for brokers that
	// require one (amqps:// only). Both or neither. AMQPDELAY_TLS_CERT, AMQPDELAY_TLS_KEY.
	TLSCert, TLSKey string
}

// ErrConfig is wrapped by every error about the configuration itself (as opposed to the broker).
var ErrConfig = errors.New("amqpconn: invalid connection configuration")

// URLOrDefault returns the first URL of c.URL (see [Config.URLs]), or DefaultURL when it is
// empty: the vhost and user name, which every URL of the list shares.
func (c Config) URLOrDefault() string { return c.URLs()[0] }

// URLs returns the URLs of c.URL's address list, in the order given, spaces around each
// trimmed and empty entries dropped; [DefaultURL] alone when there is none.
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

// Validate checks the URL and the TLS files without touching the network. Every problem is
// returned, joined; each wraps ErrConfig. A URL that does not parse, or whose user information
// is cut short by an unescaped # ? or / (see [MisplacedAt]), is named by [Redact] (without its
// user information) and never with the parser's message, which quotes the URL.
func (c Config) Validate() error {
	var errs []error
	var first amqp.URI
	var err error
	for i, raw := range c.URLs() {
		u, uerr := amqp.ParseURI(raw)
		if uerr != nil || MisplacedAt(raw) {
			errs = append(errs, urlError(raw))
			err = ErrConfig
			continue
		}
		if i == 0 {
			first = u
			continue
		}
		if u.Vhost != first.Vhost || u.Username != first.Username || u.Scheme != first.Scheme {
			errs = append(errs, fmt.Errorf("%w: URL %q of the address list differs from the first, %q, in its user name, vhost or scheme: "+
				"the URLs of a list name the nodes of one cluster, with one user and one vhost", ErrConfig, Redact(raw), Redact(c.URLOrDefault())))
		}
	}
	u := first
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, fmt.Errorf("%w: TLS client certificate and key go together: set both AMQPDELAY_TLS_CERT and AMQPDELAY_TLS_KEY (--tls-cert, --tls-key), or neither", ErrConfig))
	}
	if err == nil && u.Scheme != "amqps" && (c.TLSCA != "" || c.TLSCert != "") {
		errs = append(errs, fmt.Errorf("%w: TLS files are set (AMQPDELAY_TLS_*) but the URL scheme (AMQPDELAY_URL, --url) is %q: use amqps://", ErrConfig, u.Scheme))
	}
	for _, f := range []struct{ name, path string }{{"AMQPDELAY_TLS_CA (--tls-ca)", c.TLSCA}, {"AMQPDELAY_TLS_CERT (--tls-cert)", c.TLSCert}, {"AMQPDELAY_TLS_KEY (--tls-key)", c.TLSKey}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s file: %v", ErrConfig, f.name, err))
		}
	}
	return errors.Join(errs...)
}

// urlHelp describes the URL form.
const urlHelp = `want "amqp://" or "amqps://", then user:password@host:port/vhost; percent-encode special ` +
	`characters such as # ? / @ : %% and space in the user name and password (%%23 for #, %%3F for ?, %%2F for /, ` +
	`%%40 for @, %%3A for :, %%25 for %%, %%20 for space)`

// urlError reports a URL that is not a valid amqp:// URL. It never quotes the parser's error
// (net/url quotes a prefix of the URL that can end inside the password) nor any part of the
// user information.
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

// MisplacedAt reports whether an '@' of the URL raw lies after its host, in the path, query or
// fragment. Either an unescaped # ? or / in the user name or password cut the user information
// short (amqp://user:pa/ss@host parses as host "user", port "pa", path "/ss@host"), or the
// path holds an unescaped '@'. Such a URL would be dialed at a host and port taken from the
// password, so [Config.Validate] rejects it; write '@' in a vhost as %40.
func MisplacedAt(raw string) bool {
	i := strings.Index(raw, "://")
	if i < 0 {
		return false
	}
	rest := raw[i+3:]
	at := strings.LastIndexByte(rest, '@')
	end := strings.IndexAny(rest, "/?#")
	return at >= 0 && end >= 0 && end < at
}

// TLSConfig builds the TLS configuration for an amqps:// URL from the CA, certificate and key
// files, for the host of the first URL. It returns nil, nil for amqp:// URLs. Its errors wrap
// [ErrConfig]: a CA file that cannot be read or holds no PEM certificate, or a certificate and
// key that do not load.
func (c Config) TLSConfig() (*tls.Config, error) { return c.tlsConfigFor(c.URLOrDefault()) }

func (c Config) tlsConfigFor(raw string) (*tls.Config, error) {
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

// Dial opens a connection named name (shown in the management UI's connection list) to the
// first URL of c's address list, in a random order, that accepts it. The context bounds the
// whole dial; a context without a deadline gets 30 s, and each URL gets an even share of what
// is left of it (so a node that does not answer cannot use up the time of the others). Errors
// name URLs by [Redact], never with their passwords; the error of the last URL tried keeps the
// broker's refusal reachable with errors.As(err, **amqp091.Error), and names every URL tried.
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
	if len(errs) == 1 {
		if len(c.URLs()) == 1 && c.URLs()[0] == DefaultURL && strings.TrimSpace(c.URL) == "" {
			return nil, fmt.Errorf("%w (no broker URL was set, so RabbitMQ's default %s was tried: set AMQPDELAY_URL, "+
				"or the configuration's URL, to your broker's)", errs[0], Redact(DefaultURL))
		}
		return nil, errs[0]
	}
	return nil, fmt.Errorf("no node of the address list answered (%d URLs): %w", len(urls), errors.Join(errs...))
}

// dialOne dials the URL raw of c, bounded by ctx and deadline.
func dialOne(ctx context.Context, c Config, raw, name string, deadline time.Time) (*amqp.Connection, error) {
	tc, err := c.tlsConfigFor(raw)
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
			// The handshake must also end with the context; amqp091 clears the deadline after it.
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
			// amqp091's dial errors name the host and port, never the URL (Validate has parsed
			// the URL, so DialConfig's own parse cannot fail and quote it).
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

// Redact returns the URL raw as it may be shown in a message or a log line, without its
// password. A URL that parses is shown from its parts, with the password (when it has one)
// replaced by "***": amqp://user:***@host:5672/vhost, and the value of every query parameter
// amqp091-go does not read (heartbeat, certfile and the like are shown) replaced by "***"
// too, and a fragment as "***". A URL that does not parse, or that [MisplacedAt] reports, is
// shown by [RedactUserinfo], as which part of it is the password is unknown.
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
	// url.URL.Redacted writes the password as "xxxxx"; the user name before it holds no
	// unescaped ':'.
	return strings.Replace(u.Redacted(), ":xxxxx@", ":***@", 1)
}

// redactTail returns s, the host and what follows it, with its query shown by [redactQuery]
// and its fragment as "***".
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

// uriParams are the query parameters amqp091-go reads from a URL (its ParseURI), whose values
// are settings and file names, not secrets.
var uriParams = map[string]bool{
	"heartbeat": true, "connection_timeout": true, "channel_max": true, "frame_max": true,
	"auth_mechanism": true, "certfile": true, "keyfile": true, "cacertfile": true,
	"server_name_indication": true,
}

// redactQuery returns the raw query q with the value of every parameter that amqp091-go does
// not read replaced by "***" (a "password=" there is a mistake, and its value a secret all the
// same), and every part that is not a key=value pair, or whose key does not unescape, replaced
// by "***" whole; the parts keep their order.
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

// RedactUserinfo shows raw, a URL that may not parse, with everything up to its host that
// could hold a password replaced by "***": its scheme and "://", then "***" and what follows
// the last '@' (amqp://***@host:5672/vhost), whose query and fragment are shown as [Redact]
// shows them. Without an '@' it shows the scheme and what follows "://" up to the first ':' (a
// port that is not a number may be a password cut short: amqp://user:secret), and without
// "://" nothing of raw but what follows its last '@'.
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

// The reconnect back-off that the Publisher and the Consumer share: the defaults of a zero
// minimum and maximum, and the largest maximum (a wait randomized by ±50 % around a much larger
// one overflows time.Duration).
const (
	DefaultReconnectMin = 100 * time.Millisecond
	DefaultReconnectMax = 5 * time.Second
	MaxReconnect        = time.Hour
)

// ReconnectRange resolves the reconnect back-off bounds lo and hi of the settings struct
// owner ("Config", "Options"; 0 takes the default) and checks 0 < lo <= hi <= MaxReconnect.
// The error names both fields and the range; the caller wraps its ErrInvalidConfig around it.
func ReconnectRange(owner string, lo, hi time.Duration) (time.Duration, time.Duration, error) {
	rmin, rmax := lo, hi
	if rmin == 0 {
		rmin = DefaultReconnectMin
	}
	if rmax == 0 {
		rmax = max(DefaultReconnectMax, rmin)
	}
	if rmin <= 0 || rmax < rmin || rmax > MaxReconnect {
		return 0, 0, fmt.Errorf("%[1]s.ReconnectMin %[2]v, %[1]s.ReconnectMax %[3]v: want 0 < ReconnectMin <= ReconnectMax <= %[4]v (0: the defaults %[5]v and %[6]v)",
			owner, lo, hi, MaxReconnect, DefaultReconnectMin, DefaultReconnectMax)
	}
	return rmin, rmax, nil
}
