package amqpconn

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// brokerPassword is the one password tried against the broker: every special character.
const brokerPassword = "Zq#7?K/x@9:v%W y"

// secretPasswords hold the characters that break a URL when written unescaped: # ? / @ : %
// and space, alone and together. Each is distinctive, so none of its 3-byte substrings occurs
// in the messages by chance.
var secretPasswords = []string{
	"S3cretQ#PWzk",
	"Zq7?Kx9vWy",
	"Zq7/Kx9vWy",
	"Zq7@Kx9@vWy",
	"Zq7:Kx9:vWy",
	"Zq7%Kx9vWy",
	"Zq7%41x9vWy", // a valid escape: decodes to Zq7Ax9vWy
	"Zq7 Kx9 vWy",
	brokerPassword,
	"Zq7://Kx9@vWy",
	`Zq7"Kx9'vWy`,
	"123/456#789", // digits: read as a port when cut short
}

// leaks returns the substrings of at least 3 bytes of secret (and of its percent-decoded
// form) that text contains, except those of punctuation only ("://" is in every URL).
func leaks(text, secret string) []string {
	forms := []string{secret}
	if dec, err := url.PathUnescape(secret); err == nil && dec != secret {
		forms = append(forms, dec)
	}
	var out []string
	for _, f := range forms {
		for i := 0; i+3 <= len(f); i++ {
			for j := i + 3; j <= len(f); j++ {
				if strings.Contains(text, f[i:j]) && strings.ContainsFunc(f[i:j], isAlnum) {
					out = append(out, f[i:j])
				}
			}
		}
	}
	return out
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

func assertNoLeak(t *testing.T, what, text, secret string) {
	t.Helper()
	if l := leaks(text, secret); len(l) > 0 {
		t.Errorf("%s shows password %q (substrings %q):\n%s", what, secret, l, text)
	}
}

// brokerHost is the host:port of AMQP_URL, or "" when it is not set.
func brokerHost(t *testing.T) string {
	raw := os.Getenv("AMQP_URL")
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("AMQP_URL: %v", err)
	}
	return u.Host
}

// TestNoPasswordInErrors: for passwords with each special character, written raw (malformed)
// and percent-encoded (valid), neither Redact, RedactUserinfo, Config.Redacted, Validate nor
// Dial show any 3-byte part of the password. Against the broker the encoded password is wrong,
// so Dial fails with the broker's refusal.
func TestNoPasswordInErrors(t *testing.T) {
	host := brokerHost(t)
	for _, pw := range secretPasswords {
		// The broker answers a wrong password after a delay (about 3 s), so only one password
		// goes there; the others dial a closed port, which still goes through Dial's errors.
		dialHost := "127.0.0.1:1"
		if pw == brokerPassword && host != "" {
			dialHost = host
		}
		raw := "amqp://attack-user:" + pw + "@" + dialHost + "/v"
		encoded := (&url.URL{Scheme: "amqp", User: url.UserPassword("attack-user", pw), Host: dialHost, Path: "/"}).String()
		t.Run(pw, func(t *testing.T) {
			for _, u := range []string{raw, encoded} {
				assertNoLeak(t, "Redact", Redact(u), pw)
				assertNoLeak(t, "RedactUserinfo", RedactUserinfo(u), pw)
				assertNoLeak(t, "Redacted", Config{URL: "amqp://u:other@h/v," + u}.Redacted(), pw)
				verr := Config{URL: u}.Validate()
				if verr != nil {
					assertNoLeak(t, "Validate", verr.Error(), pw)
					if !errors.Is(verr, ErrConfig) {
						t.Errorf("Validate(%s): %v does not wrap ErrConfig", Redact(u), verr)
					}
				}
				if u == raw && strings.ContainsAny(pw, "#?/% \"") && pw != "Zq7%41x9vWy" && verr == nil {
					// ':', '@' (the last '@' ends the user information) and a valid escape are
					// allowed raw; # ? / % space and quotes are refused.
					t.Errorf("Validate accepts the raw URL with password %q", pw)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				conn, err := Dial(ctx, Config{URL: u}, "amqpconn-test")
				cancel()
				if err == nil {
					conn.Close()
					t.Fatalf("Dial with a wrong password succeeded")
				}
				assertNoLeak(t, "Dial", err.Error(), pw)
				if u == encoded && dialHost == host {
					var ae *amqp.Error
					if !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
						t.Errorf("Dial with a wrong password: %v; want the broker's ACCESS_REFUSED reachable", err)
					}
				}
			}
		})
	}
}

// TestRedact: the exact output, keeping the user name, host and vhost.
func TestRedact(t *testing.T) {
	cases := []struct{ in, want string }{
		{"amqp://guest:guest@localhost:5672/", "amqp://guest:***@localhost:5672/"},
		{"amqp://guest@localhost/v", "amqp://guest@localhost/v"},
		{"amqp://localhost:5672/v", "amqp://localhost:5672/v"},
		{"amqp://[::1]:5672/v", "amqp://[::1]:5672/v"},
		// Not a valid URL: the user information is hidden whole.
		{"amqp://u:S3c#ret@h:1/v", "amqp://***@h:1/v"},
		{"amqp://u:S3c?ret@h:1/v", "amqp://***@h:1/v"},
		{"amqp://u:S3c/ret@h:1/v", "amqp://***@h:1/v"},
		{"amqp://u:12/34@h:1/v", "amqp://***@h:1/v"}, // parses, with host u:12 and path /34@h:1/v
		{"amqp:u:pw@h", "***@h"},
		{"u:pw@h", "***@h"},
		{"amqp://u:a@b@h:1/v", "amqp://u:***@h:1/v"},
		{"amqp://u:p%23w@h/", "amqp://u:***@h/"},
		{"amqp://u:@h/", "amqp://u:***@h/"},
		{"amqp://attack-user:S3cret", "amqp://attack-user:***"},
		{"amqp://u:p1@h1/v,amqp://u:p2@h2/v", "amqp://***@h2/v"}, // one URL, not a list: see Config.Redacted
		{"ftp://u:pw@h/", "ftp://u:***@h/"},
		{"not a url", "not a url"},
		// Query parameters amqp091-go does not read are shown without their values.
		{"amqp://h/v?password=S3cret", "amqp://h/v?password=***"},
		{"amqp://u:pw@h/v?heartbeat=10&pass=S3cret&pass=x", "amqp://u:***@h/v?heartbeat=10&pass=***&pass=***"},
		{"amqp://h/v?certfile=/c.pem&token=S3cret", "amqp://h/v?certfile=/c.pem&token=***"},
		{"amqp://h/v?S3cret&heartbeat=5", "amqp://h/v?***&heartbeat=5"},
		{"amqp://h/v?%zzS3cret=1&frame_max=8192", "amqp://h/v?***&frame_max=8192"},
		{"amqp://h/v?heartbeat=S3cret;x", "amqp://h/v?heartbeat=S3cret;x"}, // heartbeat is refused by amqp091-go, not secret
		{"amqp://u:S3c?ret@h:1/v?x=1&heartbeat=5#S3cret", "amqp://***@h:1/v?x=***&heartbeat=5#***"},
		{"amqp://u:pw@h/v#S3cret", "amqp://u:***@h/v#***"},
		{"amqp://h/v#S3cret", "amqp://h/v#***"},
	}
	for _, c := range cases {
		if got := Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := RedactUserinfo("amqp://attack-user:S3c#ret@h:1/v"); got != "amqp://***@h:1/v" {
		t.Errorf("RedactUserinfo: %q", got)
	}
}

// TestValidateMessages: an unparsable URL is reported without the parser's text, with the
// scheme and host, and the hint; a wrong scheme is named.
func TestValidateMessages(t *testing.T) {
	err := Config{URL: "amqp://attack-user:S3cret#PW@127.0.0.1:43072/v"}.Validate()
	for _, want := range []string{`"amqp://***@127.0.0.1:43072/v"`, "not a valid amqp URL", "user:password@host:port/vhost", "percent-encode", "%23"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want %q", err, want)
		}
	}
	if err := (Config{URL: "ftp://u:pw@h/"}).Validate(); err == nil || !strings.Contains(err.Error(), `scheme "ftp"`) {
		t.Errorf("ftp: %v", err)
	}
	// An '@' after the host would dial a host and port taken from the password.
	if err := (Config{URL: "amqp://user:12/34@h/v"}).Validate(); err == nil || !errors.Is(err, ErrConfig) {
		t.Errorf("misplaced '@': %v", err)
	}
	if err := (Config{URL: "amqp://u:p%40w@h:5672/v%40x"}).Validate(); err != nil {
		t.Errorf("encoded '@': %v", err)
	}
}

func TestAddressList(t *testing.T) {
	c := Config{URL: " amqp://u:p1@h1:5672/v , amqp://u:p2@h2:5673/v,,"}
	got := c.URLs()
	want := []string{"amqp://u:p1@h1:5672/v", "amqp://u:p2@h2:5673/v"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("URLs() = %q, want %q", got, want)
	}
	if c.URLOrDefault() != want[0] {
		t.Errorf("URLOrDefault() = %q, want the first URL", c.URLOrDefault())
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if r := c.Redacted(); strings.Contains(r, "p1") || strings.Contains(r, "p2") || !strings.Contains(r, "h1") || !strings.Contains(r, "h2") {
		t.Errorf("Redacted() = %q: want both hosts and no password", r)
	}
	// A CA file that exists but holds no PEM certificate is found offline, as a missing one is.
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (Config{URL: "amqps://u:p@h/v", TLSCA: notPEM}).Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("CA file without PEM: %v; want ErrConfig naming it", err)
	}
	// A bad first URL is the one problem: the valid ones after it are not compared with it.
	if err := (Config{URL: "amqp://u:p@h1:bad/v,amqp://u:p@h2/v"}).Validate(); err == nil || strings.Contains(err.Error(), "differs from the first") {
		t.Errorf("bad first URL: %v; want its own error only", err)
	}
	if got := (Config{}).URLs(); len(got) != 1 || got[0] != DefaultURL {
		t.Errorf("empty URL: URLs() = %q, want DefaultURL", got)
	}
	for _, bad := range []string{
		"amqp://u:p@h1/v,amqp://u:p@h2/other",
		"amqp://u:p@h1/v,amqp://w:secret@h2/v",
		"amqp://u:p@h1/v,amqps://u:p@h2/v",
		"amqp://u:p@h1/v,http://u:secret@h2/v",
	} {
		err := Config{URL: bad}.Validate()
		if !errors.Is(err, ErrConfig) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Validate(%q) = %v, want ErrConfig without the password", Redact(bad), err)
		}
	}
}

// TestDialListNoneAnswers: with no node of the list answering, the error names every URL
// tried (the integration tests connect through lists with dead nodes).
func TestDialListNoneAnswers(t *testing.T) {
	l1, _ := net.Listen("tcp", "127.0.0.1:0")
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	a1, a2 := l1.Addr().String(), l2.Addr().String()
	l1.Close()
	l2.Close()
	c := Config{URL: "amqp://u:secret@" + a1 + "/,amqp://u:secret@" + a2 + "/"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dial(ctx, c, "t")
	if err == nil || !strings.Contains(err.Error(), a1) || !strings.Contains(err.Error(), a2) || strings.Contains(err.Error(), "secret") {
		t.Errorf("Dial of two closed ports: err = %v, want both addresses named, no password", err)
	}
}

// TestDialDefaultURLSaysSo: with no URL configured, a dial that fails says that RabbitMQ's
// default URL was tried and which variable sets another.
func TestDialDefaultURLSaysSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := Dial(ctx, Config{}, "test")
	if err == nil {
		_ = conn.Close()
		t.Skip("a broker answers on localhost:5672 with guest/guest")
	}
	if !strings.Contains(err.Error(), "no broker URL was set") || !strings.Contains(err.Error(), "AMQPDELAY_URL") {
		t.Errorf("dial with no URL: %v, want an error naming the default and AMQPDELAY_URL", err)
	}
	if strings.Contains(err.Error(), ":guest@") {
		t.Errorf("the error shows the default password: %v", err)
	}
}
