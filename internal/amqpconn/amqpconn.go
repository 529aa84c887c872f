// Package amqpconn dials RabbitMQ for the declare CLI and the amqpdelay client from one
// configuration shape (the AMQPDELAY_URL and AMQPDELAY_TLS_* variables), and redacts passwords
// from URLs before they reach a log line or an error.
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
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultURL is the broker URL used when none is configured: a local broker with RabbitMQ's
// default guest user, which RabbitMQ only accepts from loopback.
const DefaultURL = "amqp://guest:guest@localhost:5672/"

// Config says where the broker is and how to reach it. The zero value dials DefaultURL. The
// envconfig tags are the variables' full names: envconfig falls back from PREFIX_NAME to the
// tag alone, so a tag without the prefix would read a stray URL or PREFIX variable.
// The vhost comes from the URL path (https://www.rabbitmq.com/docs/uri-spec).
type Config struct {
	// URL is an amqp:// or amqps:// URL, or several URLs of one cluster separated by commas
	// (an address list: each with its own credentials, all with the same user name and vhost;
	// percent-encode a comma in a password as %2C). Dial tries them in a random order, so that
	// many clients spread over the nodes, and a client that loses its connection dials again
	// through the whole list. Empty means DefaultURL.
	URL string `envconfig:"AMQPDELAY_URL"`
	// TLSCA is a PEM file of CA certificates to verify the broker with (amqps:// only).
	// Empty means the system roots.
	TLSCA string `envconfig:"AMQPDELAY_TLS_CA"`
	// TLSCert and TLSKey are PEM files of a client certificate and its key, for brokers that
	// require one (amqps:// only). Both or neither.
	TLSCert string `envconfig:"AMQPDELAY_TLS_CERT"`
	TLSKey  string `envconfig:"AMQPDELAY_TLS_KEY"`
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
// is cut short by an unescaped # ? or / (see [MisplacedAt]), is reported without quoting the
// parser's message or the user information: errors never hold any part of the password.
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
		errs = append(errs, fmt.Errorf("%w: TLS client certificate and key go together: set both TLS_CERT and TLS_KEY, or neither", ErrConfig))
	}
	if err == nil && u.Scheme != "amqps" && (c.TLSCA != "" || c.TLSCert != "") {
		errs = append(errs, fmt.Errorf("%w: TLS files are set but the URL scheme is %q: use amqps://", ErrConfig, u.Scheme))
	}
	for _, f := range []struct{ name, path string }{{"TLS_CA", c.TLSCA}, {"TLS_CERT", c.TLSCert}, {"TLS_KEY", c.TLSKey}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s file: %v", ErrConfig, f.name, err))
		}
	}
	return errors.Join(errs...)
}

// urlHelp describes the URL form. It quotes the schemes and writes user:password@host with no
// "://" before it, so that [RedactText] leaves it intact.
const urlHelp = `want "amqp://" or "amqps://", then user:password@host:port/vhost; percent-encode special ` +
	`characters such as # ? / @ : %% and space in the user name and password (%%23 for #, %%3F for ?, %%2F for /, ` +
	`%%40 for @, %%3A for :, %%25 for %%, %%20 for space)`

// urlError reports a URL that is not a valid amqp:// URL. It never quotes the parser's error
// (net/url quotes a prefix of the URL that can end inside the password) nor any part of the
// user information.
func urlError(raw string) error {
	i := strings.Index(raw, "://")
	if i < 0 {
		return fmt.Errorf("%w: URL is not a valid amqp URL: it has no scheme; "+urlHelp, ErrConfig)
	}
	shown := RedactUserinfo(raw)
	if scheme := raw[:i]; scheme != "amqp" && scheme != "amqps" && schemeRE.MatchString(scheme) {
		return fmt.Errorf("%w: URL %q: scheme %q: want \"amqp://\" or \"amqps://\"", ErrConfig, shown, scheme)
	}
	return fmt.Errorf("%w: URL %q is not a valid amqp URL: "+urlHelp, ErrConfig, shown)
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
// files, for the host of the first URL. It returns nil, nil for amqp:// URLs.
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
			return nil, fmt.Errorf("%w: TLS_CA: %v", ErrConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: TLS_CA %s holds no PEM certificate", ErrConfig, c.TLSCA)
		}
		tc.RootCAs = pool
	}
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS_CERT/TLS_KEY: %v", ErrConfig, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Dial opens a connection named name (shown in the management UI's connection list) to the
// first URL of c's address list, in a random order, that accepts it. The context bounds the
// whole dial; a context without a deadline gets 30 s, and each URL gets an even share of what
// is left of it (so a node that does not answer cannot use up the time of the others). Errors
// never contain a URL's password; the error of the last URL tried keeps the broker's refusal
// reachable with errors.As(err, **amqp091.Error), and names every URL tried.
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
			return nil, fmt.Errorf("connect to %q: %w", Redact(raw), redactErr(r.err))
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

// Redact returns u with the password of its user information replaced by "***". It works on
// the text, not on a parsed URL, so that a password holding unescaped characters (# ? / @ :
// % or spaces) is hidden whole even when u does not parse: the password is everything between
// the first ':' after "://" and the LAST '@' (the user name before the ':' is kept). Without
// an '@' there is no password, except that a non-numeric "port" right after the host (as in
// "amqp://user:secret" cut short) is hidden too. u without "://" is returned unchanged.
func Redact(u string) string {
	i := strings.Index(u, "://")
	if i < 0 {
		return u
	}
	red, n, _, _ := redactAt(u, i)
	return u[:i] + red + u[i+n:]
}

// RedactUserinfo returns u with all its user information, name and password, replaced by
// "***": everything between "://" and the last '@'. Use it to name a URL that does not parse,
// where it is unknown which part is the password. Without an '@' it is [Redact].
func RedactUserinfo(u string) string {
	i := strings.Index(u, "://")
	if i < 0 {
		return u
	}
	if at := strings.LastIndexByte(u[i+3:], '@'); at >= 0 {
		return u[:i+3] + "***" + u[i+3+at:]
	}
	return Redact(u)
}

// redactAt redacts the URL whose "://" starts at s[i:], reading to the end of s. It returns
// the replacement of s[i:i+n], n, the text it hid ("" when none), and whether that text was a
// non-numeric port (a URL cut short before its '@').
func redactAt(s string, i int) (red string, n int, secret string, cut bool) {
	rest := s[i+3:]
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if colon := strings.IndexByte(rest[:at], ':'); colon >= 0 {
			return "://" + rest[:colon+1] + "***@", 3 + at + 1, rest[colon+1 : at], false
		}
		return "://" + rest[:at+1], 3 + at + 1, "", false // a user name only
	}
	// No '@': the authority runs to the first delimiter. A ':' in it is followed by a port,
	// and anything but digits there is taken for a password (a URL cut short).
	end := strings.IndexAny(rest, "/?#\"'`()<>{},; \t\r\n")
	if end < 0 {
		end = len(rest)
	}
	auth := rest[:end]
	from := 0
	if strings.HasPrefix(auth, "[") { // IPv6 literal: [::1]:5672
		if j := strings.IndexByte(auth, ']'); j >= 0 {
			from = j
		}
	}
	colon := strings.IndexByte(auth[from:], ':')
	if colon < 0 {
		return "://" + auth, 3 + end, "", false
	}
	colon += from
	port := auth[colon+1:]
	if strings.Trim(port, "0123456789") == "" || port == "***" {
		return "://" + auth, 3 + end, "", false
	}
	return "://" + auth[:colon+1] + "***", 3 + end, port, true
}

// redactedError keeps the wrapped error reachable while hiding any URL password in its text.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactErr hides passwords that amqp091 or net errors may quote from the URL.
func redactErr(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	red := RedactText(msg)
	if red == msg {
		return err
	}
	return &redactedError{msg: red, err: err}
}

// RedactText replaces the password of every URL in s with "***". Use it on any text that may
// quote a broker URL before logging or returning it.
//
// A URL inside a Go-quoted string ("...", as %q writes it) is redacted within the quotes
// ([Redact] of the unquoted text), so the text after the closing quote is left alone (unless
// the quoted URL is cut short at a ':' and an '@' follows: a quote in the password ended it,
// and it is treated as unquoted). An unquoted URL has no known end: its password is taken to
// run from the first ':' after "://" to the LAST '@' of s, which may hide more than the
// password but never less. Every other occurrence in s of a hidden password of 3 bytes or more
// (as written, percent-decoded or quoted), and every quoted string of 3 bytes or more that is
// part of one, is replaced too, so text that repeats the password or a piece of it, like
// net/url's `invalid port ":secret"` or `invalid URL escape "%xy"`, does not show it.
//
// Text without "://", or with only quoted URLs without a password, is returned unchanged:
// messages meant to pass through intact quote URLs and their forms ("amqp://") and write
// user:password@host only where no unquoted "://" precedes it.
func RedactText(s string) string {
	var secrets []string
	out := redactText(s, &secrets)
	if len(secrets) == 0 {
		return out
	}
	for _, sec := range secrets {
		forms := []string{sec}
		if dec, err := url.PathUnescape(sec); err == nil && dec != sec {
			forms = append(forms, dec)
		}
		if q := strconv.Quote(sec); q[1:len(q)-1] != sec {
			forms = append(forms, q[1:len(q)-1])
		}
		for _, f := range forms {
			if len(f) >= 3 && f != "***" {
				out = strings.ReplaceAll(out, f, "***")
			}
		}
	}
	return redactPieces(out, secrets)
}

// redactText is RedactText's first pass: it redacts each URL and collects what it hid.
func redactText(s string, secrets *[]string) string {
	var b strings.Builder
	pos := 0
	for pos < len(s) {
		c := strings.Index(s[pos:], "://")
		if c < 0 {
			break
		}
		if q := strings.IndexByte(s[pos:], '"'); q >= 0 && q < c {
			lit, err := strconv.QuotedPrefix(s[pos+q:])
			if err != nil { // an unbalanced quote: an ordinary character
				b.WriteString(s[pos : pos+q+1])
				pos += q + 1
				continue
			}
			if !cutByQuote(lit, s[pos+q+len(lit):]) {
				b.WriteString(s[pos : pos+q])
				b.WriteString(redactQuoted(lit, secrets))
				pos += q + len(lit)
				continue
			}
		}
		b.WriteString(s[pos : pos+c])
		red, n, secret, _ := redactAt(s, pos+c)
		if secret != "" {
			*secrets = append(*secrets, secret)
		}
		b.WriteString(red)
		pos += c + n
	}
	if pos == 0 {
		return s
	}
	b.WriteString(s[pos:])
	return b.String()
}

// cutByQuote reports whether the string literal lit holds a URL cut short at a ':' with an '@'
// in after, the text that follows it: a password holding an unescaped quote ended lit early.
func cutByQuote(lit, after string) bool {
	v, err := strconv.Unquote(lit)
	if err != nil {
		return false
	}
	i := strings.Index(v, "://")
	if i < 0 {
		return false
	}
	_, _, _, cut := redactAt(v, i)
	return cut && strings.IndexByte(after, '@') >= 0
}

// redactQuoted redacts the URLs inside the Go string literal lit.
func redactQuoted(lit string, secrets *[]string) string {
	v, err := strconv.Unquote(lit)
	if err != nil {
		return lit
	}
	red := redactText(v, secrets)
	if red == v {
		return lit
	}
	return strconv.Quote(red)
}

// redactPieces replaces every quoted string in s of 3 bytes or more that is part of a secret
// (as net/url quotes a piece of the password in `invalid port ":pa"` or `invalid URL escape
// "%xy"`).
func redactPieces(s string, secrets []string) string {
	var b strings.Builder
	pos := 0
	for {
		q := strings.IndexByte(s[pos:], '"')
		if q < 0 {
			break
		}
		lit, err := strconv.QuotedPrefix(s[pos+q:])
		if err != nil {
			b.WriteString(s[pos : pos+q+1])
			pos += q + 1
			continue
		}
		b.WriteString(s[pos : pos+q])
		pos += q + len(lit)
		if v, err := strconv.Unquote(lit); err == nil && len(v) >= 3 && v != "***" && partOfAny(v, secrets) {
			b.WriteString(`"***"`)
			continue
		}
		b.WriteString(lit)
	}
	b.WriteString(s[pos:])
	return b.String()
}

// partOfAny reports whether v, or v without a leading ':' (net/url quotes a port with it), is
// part of one of the secrets.
func partOfAny(v string, secrets []string) bool {
	for _, sec := range secrets {
		if strings.Contains(sec, v) || len(v) > 3 && v[0] == ':' && strings.Contains(sec, v[1:]) {
			return true
		}
	}
	return false
}
