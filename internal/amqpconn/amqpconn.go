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
	"net"
	"net/url"
	"os"
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
	// URL is an amqp:// or amqps:// URL. Empty means DefaultURL.
	URL string `envconfig:"URL"`
	// TLSCA is a PEM file of CA certificates to verify the broker with (amqps:// only).
	// Empty means the system roots.
	TLSCA string `envconfig:"TLS_CA"`
	// TLSCert and TLSKey are PEM files of a client certificate and its key, for brokers that
	// require one (amqps:// only). Both or neither.
	TLSCert string `envconfig:"TLS_CERT"`
	TLSKey  string `envconfig:"TLS_KEY"`
}

// ErrConfig is wrapped by every error about the configuration itself (as opposed to the broker).
var ErrConfig = errors.New("amqpconn: invalid connection configuration")

// URLOrDefault returns c.URL, or DefaultURL when it is empty.
func (c Config) URLOrDefault() string {
	if c.URL == "" {
		return DefaultURL
	}
	return c.URL
}

// Validate checks the URL scheme and the TLS files without touching the network. Every problem
// is returned, joined; each wraps ErrConfig.
func (c Config) Validate() error {
	var errs []error
	u, err := amqp.ParseURI(c.URLOrDefault())
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: URL %q: %v (want amqp://user:password@host:port/vhost)", ErrConfig, Redact(c.URLOrDefault()), redactErr(err)))
	}
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

// TLSConfig builds the TLS configuration for an amqps:// URL from the CA, certificate and key
// files. It returns nil, nil for amqp:// URLs.
func (c Config) TLSConfig() (*tls.Config, error) {
	u, err := amqp.ParseURI(c.URLOrDefault())
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

// Dial opens a connection named name (shown in the management UI's connection list). The
// context bounds the TCP connect, TLS handshake and AMQP handshake; a context without a deadline
// gets 30 s. Errors never contain the URL's password; broker refusals stay reachable with
// errors.As(err, **amqp091.Error).
func Dial(ctx context.Context, c Config, name string) (*amqp.Connection, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrConfig)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tc, err := c.TLSConfig()
	if err != nil {
		return nil, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
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
		conn, err := amqp.DialConfig(c.URLOrDefault(), cfg)
		done <- result{conn, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("connect to %s: %w", Redact(c.URLOrDefault()), redactErr(r.err))
		}
		return r.conn, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("connect to %s: %w", Redact(c.URLOrDefault()), ctx.Err())
	}
}

// Redact returns u with the password of its user information replaced by "***". Strings that do
// not parse as URLs are returned with anything between "://" and "@" replaced instead, so a
// malformed URL still never shows a password.
func Redact(u string) string {
	p, err := url.Parse(u)
	if err == nil && p.User != nil {
		if _, has := p.User.Password(); has {
			p.User = url.UserPassword(p.User.Username(), "***")
			s := p.String()
			return strings.Replace(s, "%2A%2A%2A", "***", 1)
		}
		return u
	}
	if err != nil {
		if i := strings.Index(u, "://"); i >= 0 {
			if j := strings.LastIndex(u, "@"); j > i {
				return u[:i+3] + "***" + u[j:]
			}
		}
	}
	return u
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
	red := redactText(msg)
	if red == msg {
		return err
	}
	return &redactedError{msg: red, err: err}
}

// redactText replaces the password of every URL-looking token in s.
func redactText(s string) string {
	fields := strings.Fields(s)
	for _, f := range fields {
		trim := strings.Trim(f, `"'(),;`)
		if strings.Contains(trim, "://") && strings.Contains(trim, "@") {
			s = strings.ReplaceAll(s, trim, Redact(trim))
		}
	}
	return s
}

// RedactText replaces the password of every URL in s with "***". Use it on any text that may
// quote a broker URL before logging or returning it.
func RedactText(s string) string { return redactText(s) }
