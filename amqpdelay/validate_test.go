package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestValidateMessage(t *testing.T) {
	long := strings.Repeat("r", 256)
	max := strings.Repeat("m", 255)
	// Multi-byte runes: 128 of them are 256 bytes, though only 128 characters.
	wide := strings.Repeat("é", 128)
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name     string
		exchange string
		key      string
		msg      amqp.Publishing
		want     []string // substrings of the error; nil: no error
	}{
		{name: "ok", exchange: "orders", key: "k", msg: amqp.Publishing{
			Headers: amqp.Table{"f": 1.5, "f32": float32(-2), "n": amqp.Table{"a": []any{0.0, math.MaxFloat64}}, "d": amqp.Decimal{Scale: 2, Value: 5}},
		}},
		{name: "255 bytes everywhere", exchange: max, key: max, msg: amqp.Publishing{
			ContentType: max, ContentEncoding: max, CorrelationId: max, ReplyTo: max, Expiration: strings.Repeat("0", 255),
			MessageId: max, Type: max, UserId: max, AppId: max, Headers: amqp.Table{max: amqp.Table{max: 1}},
		}},
		{name: "routing key", exchange: "orders", key: strings.Repeat("r", 300), want: []string{"routing key", "300 bytes", "255"}},
		{name: "exchange", exchange: long, want: []string{"exchange", "256 bytes"}},
		{name: "exchange not UTF-8", exchange: "bad\xff", want: []string{`exchange "bad\xff" is not valid UTF-8`}},
		{name: "exchange with LF", exchange: "orders\n", want: []string{`exchange "orders\n" holds a control character (U+000A at byte 6)`}},
		{name: "exchange with DEL", exchange: "or\x7fders", want: []string{"control character (U+007F at byte 2)"}},
		{name: "exchange in other scripts", exchange: "заказы.é:order-1_x", key: "k"},
		{name: "multi-byte routing key", key: wide, want: []string{"routing key", "256 bytes"}},
		{name: "ContentType", msg: amqp.Publishing{ContentType: long}, want: []string{"msg.ContentType"}},
		{name: "ContentEncoding", msg: amqp.Publishing{ContentEncoding: long}, want: []string{"msg.ContentEncoding"}},
		{name: "CorrelationId", msg: amqp.Publishing{CorrelationId: long}, want: []string{"msg.CorrelationId"}},
		{name: "ReplyTo", msg: amqp.Publishing{ReplyTo: long}, want: []string{"msg.ReplyTo"}},
		{name: "Expiration", msg: amqp.Publishing{Expiration: long}, want: []string{"msg.Expiration"}},
		{name: "Expiration not digits", msg: amqp.Publishing{Expiration: "-5"}, want: []string{`msg.Expiration "-5" is not a whole number`, "406"}},
		{name: "Expiration words", msg: amqp.Publishing{Expiration: "1m"}, want: []string{"msg.Expiration", `"60000"`}},
		{name: "Expiration digits", msg: amqp.Publishing{Expiration: "60000"}},
		{name: "Expiration at RabbitMQ's maximum", msg: amqp.Publishing{Expiration: "315360000000"}},
		{name: "Expiration above RabbitMQ's maximum", msg: amqp.Publishing{Expiration: "315360000001"}, want: []string{"msg.Expiration", "315360000000 ms", "value_too_large"}},
		{name: "Expiration beyond 64 bits", msg: amqp.Publishing{Expiration: "99999999999999999999999"}, want: []string{"msg.Expiration", "value_too_large"}},
		{name: "CC not an array", msg: amqp.Publishing{Headers: amqp.Table{"CC": "a.b"}}, want: []string{`msg.Headers["CC"] is a string`, "array"}},
		{name: "BCC not an array", msg: amqp.Publishing{Headers: amqp.Table{"BCC": amqp.Table{}}}, want: []string{`msg.Headers["BCC"]`}},
		{name: "CC array", msg: amqp.Publishing{Headers: amqp.Table{"CC": []any{"a.b"}, "BCC": []any{"c"}}}},
		{name: "DeliveryMode 7", msg: amqp.Publishing{DeliveryMode: 7}, want: []string{"msg.DeliveryMode 7", "amqp.Persistent"}},
		{name: "DeliveryMode 1 and 2", msg: amqp.Publishing{DeliveryMode: 1, Headers: amqp.Table{"m": amqp.Persistent}}},
		{name: "int beyond 32 bits", msg: amqp.Publishing{Headers: amqp.Table{"n": 1 << 40}}, want: []string{`msg.Headers["n"] is the int 1099511627776`, "int64"}},
		{name: "negative int beyond 32 bits, nested", msg: amqp.Publishing{Headers: amqp.Table{"a": []any{-(1 << 33)}}}, want: []string{`msg.Headers["a"][0]`}},
		{name: "int64 beyond 32 bits is fine", msg: amqp.Publishing{Headers: amqp.Table{"n": int64(1 << 40), "m": math.MaxInt32}}},
		{name: "MessageId", msg: amqp.Publishing{MessageId: long}, want: []string{"msg.MessageId"}},
		{name: "Type", msg: amqp.Publishing{Type: long}, want: []string{"msg.Type"}},
		{name: "UserId", msg: amqp.Publishing{UserId: long}, want: []string{"msg.UserId"}},
		{name: "AppId", msg: amqp.Publishing{AppId: long}, want: []string{"msg.AppId"}},
		{name: "header key", msg: amqp.Publishing{Headers: amqp.Table{long: "v"}}, want: []string{"msg.Headers key", "256 bytes", "table key"}},
		{name: "nested table key", msg: amqp.Publishing{Headers: amqp.Table{"outer": amqp.Table{long: 1}}}, want: []string{`msg.Headers["outer"] key`}},
		{name: "table key in array", msg: amqp.Publishing{Headers: amqp.Table{"arr": []any{"s", amqp.Table{long: 1}}}}, want: []string{`msg.Headers["arr"][1] key`}},
		{name: "NaN float64", msg: amqp.Publishing{Headers: amqp.Table{"score": nan}}, want: []string{`msg.Headers["score"] is NaN`, "541"}},
		{name: "+Inf float64", msg: amqp.Publishing{Headers: amqp.Table{"score": inf}}, want: []string{`msg.Headers["score"] is +Inf`}},
		{name: "-Inf float32", msg: amqp.Publishing{Headers: amqp.Table{"score": float32(math.Inf(-1))}}, want: []string{`msg.Headers["score"] is -Inf`}},
		{name: "NaN float32", msg: amqp.Publishing{Headers: amqp.Table{"score": float32(nan)}}, want: []string{`is NaN`}},
		{name: "NaN nested in table", msg: amqp.Publishing{Headers: amqp.Table{"a": amqp.Table{"b": nan}}}, want: []string{`msg.Headers["a"]["b"] is NaN`}},
		{name: "Inf nested in array", msg: amqp.Publishing{Headers: amqp.Table{"a": []any{1, []any{inf}}}}, want: []string{`msg.Headers["a"][1][0] is +Inf`}},
		{name: "tables 32 deep", msg: amqp.Publishing{Headers: nested(32, false)}},
		{name: "tables 33 deep", msg: amqp.Publishing{Headers: nested(33, false)}, want: []string{`msg.Headers["a"]["a"]`, "table nested 33 deep", "32 levels"}},
		{name: "arrays 32 deep", msg: amqp.Publishing{Headers: nested(32, true)}},
		{name: "arrays 33 deep", msg: amqp.Publishing{Headers: nested(33, true)}, want: []string{`[0][0]`, "array nested 33 deep"}},
		{name: "tables 10000 deep", msg: amqp.Publishing{Headers: nested(10000, false)}, want: []string{"table nested 33 deep"}},
		{name: "array of 8192", msg: amqp.Publishing{Headers: amqp.Table{"w": make([]any, 8192)}}},
		{name: "array of 8193", msg: amqp.Publishing{Headers: amqp.Table{"w": make([]any, 8193)}}, want: []string{`msg.Headers["w"] is a array of 8193 entries`, "8192"}},
		{name: "nested table of 8193", msg: amqp.Publishing{Headers: amqp.Table{"t": []any{wideTable(8193)}}}, want: []string{`msg.Headers["t"][0] is a table of 8193`}},
		{name: "nested table of 8192", msg: amqp.Publishing{Headers: amqp.Table{"t": wideTable(8192)}}},
		{name: "headers of 8128", msg: amqp.Publishing{Headers: wideTable(8128)}},
		{name: "headers of 8129", msg: amqp.Publishing{Headers: wideTable(8129)}, want: []string{"msg.Headers has 8129 entries", "8128"}},
		{name: "every problem at once", key: long, msg: amqp.Publishing{Type: long, Headers: amqp.Table{"x": nan, long: 1}},
			want: []string{"routing key", "msg.Type", `msg.Headers["x"] is NaN`, "msg.Headers key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateMessage(tt.exchange, tt.key, &tt.msg)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused a valid message: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("err = %v, want ErrInvalidInput", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if len(err.Error()) > 2000 {
				t.Errorf("error is %d bytes long: long values should be cut", len(err.Error()))
			}
		})
	}
}

// nested returns a headers table whose value "a" holds tables (or, with arrays, arrays) nested
// depth deep below the headers table.
func nested(depth int, arrays bool) amqp.Table {
	var v any = "leaf"
	for range depth {
		if arrays {
			v = []any{v}
		} else {
			v = amqp.Table{"a": v}
		}
	}
	return amqp.Table{"a": v}
}

// wideTable returns a table of n entries.
func wideTable(n int) amqp.Table {
	t := make(amqp.Table, n)
	for i := range n {
		t["k"+fmt.Sprint(i)] = int64(i)
	}
	return t
}

// TestValidateMessageDoesNotModify: validation only reads the message.
func TestValidateMessageDoesNotModify(t *testing.T) {
	h := amqp.Table{"a": amqp.Table{"b": math.NaN()}, "t": time.Unix(1, 0)}
	msg := amqp.Publishing{Headers: h}
	_ = validateMessage("x", "k", &msg)
	if len(h) != 2 || len(h["a"].(amqp.Table)) != 1 {
		t.Errorf("headers modified: %v", h)
	}
}

// TestIsIOError: connection failures may be retried on a new connection; amqp091's encoding
// errors (the message itself is bad) must not be.
func TestIsIOError(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{amqp.ErrClosed, true},
		{fmt.Errorf("wrapped: %w", amqp.ErrClosed), true},
		{io.EOF, true},
		{io.ErrClosedPipe, true},
		{&net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{net.ErrClosed, true},
		{fmt.Errorf("amqp: shortstr %q exceeds 255 bytes", "rrr"), false},
		{fmt.Errorf("writing key %q: %w", "k", errors.New("amqp: shortstr \"k\" exceeds 255 bytes")), false},
		{amqp.ErrFieldType, false},
		{errors.New("malformed frame: missing method"), false},
	}
	for _, tt := range tests {
		if got := isIOError(tt.err); got != tt.want {
			t.Errorf("isIOError(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestNoEventAfterClose: once Close has begun (a reconnection attempt it cancels fails with
// "context canceled"), the reconnect handler hears nothing.
func TestNoEventAfterClose(t *testing.T) {
	var got []ReconnectEvent
	p := &Publisher{cfg: Config{OnReconnect: func(e ReconnectEvent) { got = append(got, e) }}}
	p.closeCtx, p.cancel = context.WithCancel(context.Background())
	p.event(ReconnectEvent{Kind: Disconnected})
	p.cancel()
	p.event(ReconnectEvent{Kind: ReconnectFailed, Err: errors.New("context canceled")})
	if len(got) != 1 || got[0].Kind != Disconnected {
		t.Errorf("events = %+v, want only the one before Close", got)
	}
}

// TestContentHeaderSize checks the encoded size against sums worked out by hand from AMQP
// 0-9-1's encoding (as amqp091 writes it); TestPublisherHeaderFrameLimit checks the same
// boundary against the broker.
func TestContentHeaderSize(t *testing.T) {
	const fixed = 14 // class id 2, weight 2, body size 8, property flags 2
	tests := []struct {
		name string
		msg  amqp.Publishing
		want int
	}{
		{"nothing set", amqp.Publishing{Body: []byte("ignored")}, fixed},
		{"short strings", amqp.Publishing{ContentType: "text/plain", MessageId: "m1"}, fixed + 1 + 10 + 1 + 2},
		{"delivery mode, priority, timestamp", amqp.Publishing{DeliveryMode: 2, Priority: 1, Timestamp: time.Unix(1, 0)}, fixed + 1 + 1 + 8},
		{"empty headers are not sent", amqp.Publishing{Headers: amqp.Table{}}, fixed},
		// table length 4; "s": key 1+1, 'S' 1 + length 4 + 3.
		{"string header", amqp.Publishing{Headers: amqp.Table{"s": "abc"}}, fixed + 4 + 2 + 1 + 4 + 3},
		{"scalar headers", amqp.Publishing{Headers: amqp.Table{
			"b": true, "i8": int8(1), "i16": int16(1), "i32": int32(1), "i": 1, "i64": int64(1), "f32": float32(1), "f64": 1.0,
			"d": amqp.Decimal{Scale: 1, Value: 1}, "t": time.Unix(1, 0), "n": nil, "x": []byte("ab"),
		}}, fixed + 4 +
			(2 + 2) + (3 + 2) + (4 + 3) + (4 + 5) + (2 + 5) + (4 + 9) + (4 + 5) + (4 + 9) +
			(2 + 6) + (2 + 9) + (2 + 1) + (2 + 5 + 2)},
		// "a": key 2, 'A' 1 + length 4 + elements ('I' 5, 'F' 1 + 4 + ("k": 2 + 'S' 5 + 1)).
		{"nested array and table", amqp.Publishing{Headers: amqp.Table{"a": []any{int32(7), amqp.Table{"k": "v"}}}},
			fixed + 4 + 2 + 5 + 5 + (5 + 2 + 5 + 1)},
	}
	for _, tt := range tests {
		if got := contentHeaderSize(&tt.msg); got != tt.want {
			t.Errorf("%s: contentHeaderSize = %d, want %d", tt.name, got, tt.want)
		}
	}
	big := amqp.Publishing{Headers: amqp.Table{"pad": strings.Repeat("x", 131072)}}
	if p := headerTooLarge(contentHeaderSize(&big), 131072, 0); !strings.Contains(p, "frame_max of 131072") || !strings.Contains(p, "into the body") {
		t.Errorf("headerTooLarge = %q, want it to name frame_max and the fix", p)
	}
	if p := headerTooLarge(contentHeaderSize(&big), 0, 0); p != "" {
		t.Errorf("headerTooLarge with an unknown frame_max = %q, want no verdict", p)
	}
	small := amqp.Publishing{Headers: amqp.Table{"pad": "x"}}
	if p := headerTooLarge(contentHeaderSize(&small), 4096, 0); p != "" {
		t.Errorf("headerTooLarge of a small message = %q", p)
	}
}

// TestPreviewKeepsCharactersWhole: a long multi-byte value is cut between characters.
func TestPreviewKeepsCharactersWhole(t *testing.T) {
	got := preview(strings.Repeat("é", 100))
	if !utf8.ValidString(got) || strings.Contains(got, `\x`) {
		t.Errorf("preview cut a character: %s", got)
	}
}

// TestPublishesDrain: Close's wait ends when the last publish in progress leaves, new ones are
// refused from the start of Close, and a Close with none in progress does not wait.
func TestPublishesDrain(t *testing.T) {
	var c publishes
	c.drained = make(chan struct{})
	if !c.enter() || !c.enter() {
		t.Fatal("enter refused before close")
	}
	drained := c.close()
	if c.enter() {
		t.Error("enter accepted after close")
	}
	c.leave()
	select {
	case <-drained:
		t.Fatal("drained with a publish still in progress")
	default:
	}
	c.leave()
	select {
	case <-drained:
	default:
		t.Fatal("not drained after the last publish left")
	}
	idle := publishes{drained: make(chan struct{})}
	select {
	case <-idle.close():
	default:
		t.Fatal("an idle Publisher's close waits")
	}
}
