//go:build integration

package integration

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// deadLetterMargin mirrors amqpdelay's margin beyond the computed post-hop size (room for a
// quorum queue's x-delivery-count and, from RabbitMQ 4.3, x-acquired-count on redelivery).
const deadLetterMargin = 58

// countHeaderSize is the encoded size of x-delivery-count or x-acquired-count (a long field:
// key length 1, the 16-byte name, type 1, 8 bytes).
const countHeaderSize = 1 + 16 + 1 + 8

// TestPublisherDeadLetterHeaderLimit: every hop of a delayed message makes RabbitMQ add
// dead-letter headers, and an x-death entry repeats the routing key and the CC list; a quorum
// ready queue that `rabbitdelay apply` declared adds one more entry when it parks the message
// (reason delivery_limit, the longest). Publish computes the size the headers reach after the
// last hop of the message's path and that parking: on a real broker, for a 4,095 ms ladder
// delay (3 hops; 4 in the default order, top-split) and for a bucket (1 hop), a message with a CC list whose headers are just
// under that limit is confirmed and delivered intact to a plain consumer whose connection stays
// open (also when it is returned as failed, basic.reject with requeue, to the ready queue and
// comes back with x-delivery-count, and from RabbitMQ 4.3 x-acquired-count, which the margin
// leaves room for), one byte more is refused with ErrInvalidInput and nothing is
// sent. Returned once more, past the ready queue's delivery limit of 1, it is parked, and a
// plain consumer of the parking queue gets it with its connection open: the size read off the
// wire there is the computed one less the margin (4.x), or less the margin and the
// x-last-death-* headers that RabbitMQ adds from 3.13 only.
func TestPublisherDeadLetterHeaderLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		delay time.Duration
		path  amqpdelay.Path
		hops  int
		order ttlbuckets.Order
	}{
		{"ladder", 4095 * time.Millisecond, amqpdelay.PathLadder, 3, ttlbuckets.ShortestFirst}, // 0xfff ms: digits 15, 15, 15
		// 11 units of level 2 first, then 15 of level 0 and of level 1, then 4 of level 2
		// (u = 1 + 0xff mod 14): one hop more than shortest-first.
		{"ladder top-split", 4095 * time.Millisecond, amqpdelay.PathLadder, 4, ttlbuckets.TopSplit},
		{"bucket", 1500 * time.Millisecond, amqpdelay.PathBucket, 1, ttlbuckets.ShortestFirst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := brokertest.NewEnv(t)
			target := env.Name("orders")
			spec := testSpec(env, delayspec.Target{Name: target, Type: "direct"})
			spec.Buckets = delayspec.Delays{1500 * time.Millisecond}
			spec.Ladder.Order = tc.order
			q := env.Name("ready")
			spec.ReadyQueues = delayspec.ReadyQueues{{Queue: q, Exchange: target, BindingKey: "k"}}
			spec.ReadyDeliveryLimit = 1 // parked at the second return
			declareTopology(t, env, spec)
			c := newSnoopConsumer(t, env.URL, q)
			parking := newSnoopConsumer(t, env.URL, spec.WithDefaults().Names().Parking())
			p := newPublisher(t, env, spec)
			ctx := pubCtx(t)
			frameMax := env.Dial(t).Config.FrameSize // the Publisher negotiates the same

			// 30 CC keys of 100 bytes: 3,150 bytes more in every x-death entry. No queue is
			// bound by them: the target routes the message by "k" only.
			var cc []any
			for i := range 30 {
				cc = append(cc, fmt.Sprintf("cc.%03d.", i)+strings.Repeat("c", 93))
			}
			msg := func(id string, pad int) amqp.Publishing {
				return amqp.Publishing{MessageId: id, Body: []byte("body of " + id), Headers: amqp.Table{
					"pad": strings.Repeat("p", pad), "CC": cc, "BCC": []any{"bcc.nobody"}}}
			}

			// Far too large: the refusal gives the sizes, from which the largest pad follows (every
			// message ID below has 5 bytes, like "probe").
			_, err := p.Publish(ctx, target, "k", msg("probe", frameMax), tc.delay)
			size, reserve, total := refusalSizes(t, err)
			if total != size+reserve || total <= frameMax {
				t.Fatalf("refusal sizes %d + %d = %d: want a sum above frame_max %d", size, reserve, total, frameMax)
			}
			largest := frameMax - (total - frameMax)

			// One byte over: refused, nothing sent.
			r, err := p.Publish(ctx, target, "k", msg("overs", largest+1), tc.delay)
			if _, _, overTotal := refusalSizes(t, err); overTotal != frameMax+1 {
				t.Errorf("one byte over: computed %d bytes when delivered, want frame_max+1 = %d", overTotal, frameMax+1)
			}
			if r.MessageID != "" {
				t.Errorf("one byte over: receipt %+v, want none", r)
			}
			// Just under: confirmed, on the path and hops under test.
			r, err = p.Publish(ctx, target, "k", msg("under", largest), tc.delay)
			if err != nil || r.Path != tc.path || r.Hops != tc.hops {
				t.Fatalf("just under the limit (pad %d): %+v, %v; want %v with %d hops", largest, r, err, tc.path, tc.hops)
			}
			// A small message on the same path after it: it arrives after "under" (same queues,
			// same delay, FIFO), so "overs", had it been sent, would have arrived before it.
			if _, err := p.Publish(ctx, target, "k", msg("after", 1), tc.delay); err != nil {
				t.Fatalf("small message after: %v", err)
			}

			under := c.next(t, 60*time.Second)
			if under.d.MessageId != "under" {
				t.Fatalf("first delivery %q, want \"under\" (\"overs\" must not have been sent)", under.d.MessageId)
			}
			if got, ok := under.d.Headers["pad"].(string); !ok || len(got) != largest || string(under.d.Body) != "body of under" {
				t.Errorf("\"under\" not intact: pad %d bytes (want %d), body %q", len(got), largest, under.d.Body)
			}
			if got, ok := under.d.Headers["CC"].([]any); !ok || len(got) != len(cc) {
				t.Errorf("\"under\" lost its CC list: %v", under.d.Headers["CC"])
			}
			deaths, _ := under.d.Headers["x-death"].([]any)
			if len(deaths) != tc.hops {
				t.Fatalf("\"under\" has %d x-death entries, want %d: the test no longer tests what it says", len(deaths), tc.hops)
			}
			if keys, _ := deaths[0].(amqp.Table)["routing-keys"].([]any); len(keys) != 1+len(cc) {
				t.Errorf("an x-death entry has %d routing keys, want the key and the %d CC keys", len(keys), len(cc))
			}
			// Returned as failed to the quorum ready queue, "under" comes back with
			// x-delivery-count (and x-acquired-count from 4.3): the margin's room. "after" may
			// come first. basic.reject with requeue counts toward the delivery limit on every
			// version; from 4.3 on a basic.nack with requeue does not.
			if err := under.d.Reject(true); err != nil {
				t.Fatalf("reject: %v", err)
			}
			var again snooped
			for seen := map[string]bool{}; !seen["after"] || !seen["under"]; {
				d := c.next(t, 60*time.Second)
				if seen[d.d.MessageId] || (d.d.MessageId != "after" && d.d.MessageId != "under") {
					t.Fatalf("unexpected delivery %q (redelivered %v)", d.d.MessageId, d.d.Redelivered)
				}
				seen[d.d.MessageId] = true
				if d.d.MessageId == "under" {
					again = d
					// Returned once more: past the delivery limit, parked.
					if err := d.d.Reject(true); err != nil {
						t.Fatalf("reject: %v", err)
					}
					continue
				}
				if err := d.d.Ack(false); err != nil {
					t.Fatalf("ack: %v", err)
				}
			}
			if err := c.open(); err != nil {
				t.Fatalf("the consumer's connection closed: %v", err)
			}
			if _, ok := again.d.Headers["x-delivery-count"]; !ok || again.frame+8 > frameMax {
				t.Errorf("redelivered \"under\": %d-byte header frame, x-delivery-count %v; want it within frame_max %d, with the header",
					again.frame+8, again.d.Headers["x-delivery-count"], frameMax)
			}
			if grew := again.frame - under.frame; grew > deadLetterMargin {
				t.Errorf("the redelivery added %d bytes, more than the %d-byte margin", grew, deadLetterMargin)
			}

			parked := parking.next(t, 60*time.Second)
			if parked.d.MessageId != "under" {
				t.Fatalf("parked %q, want \"under\"", parked.d.MessageId)
			}
			if err := parked.d.Ack(false); err != nil {
				t.Fatalf("ack the parked message: %v", err)
			}
			if err := parking.open(); err != nil {
				t.Fatalf("the parking queue's consumer's connection closed: %v", err)
			}
			pdeaths, _ := parked.d.Headers["x-death"].([]any)
			newest, _ := pdeaths[0].(amqp.Table)
			if len(pdeaths) != tc.hops+1 || newest["queue"] != q || newest["reason"] != "delivery_limit" {
				t.Fatalf("parked \"under\": %d x-death entries, newest %v; want %d, the newest for %s with reason delivery_limit",
					len(pdeaths), newest, tc.hops+1, q)
			}

			// The real sizes, off the wire, against the computation (frame_max for "under" once
			// parked). The delivery before parking is smaller by the park's x-death entry.
			got, computed := parked.frame+8, frameMax // the frame's type, channel, size and end octets
			if got > computed || under.frame+8 >= got {
				t.Fatalf("RabbitMQ delivered %d-byte header frames (%d parked), more than the %d bytes the Publisher computed, or the parked one not larger",
					under.frame+8, got, computed)
			}
			want := computed - deadLetterMargin
			for _, h := range []string{"x-delivery-count", "x-acquired-count"} {
				if _, ok := parked.d.Headers[h]; ok {
					want += countHeaderSize // kept from the returns: within the margin
				}
			}
			lastQ, _ := newest["queue"].(string)
			lastX, _ := newest["exchange"].(string)
			_, hasLast := parked.d.Headers["x-last-death-queue"]
			if !c.addsLastDeath() {
				if hasLast {
					t.Errorf("RabbitMQ %s added x-last-death-*: the test's version rule is wrong", c.version)
				}
				// x-last-death-reason, -queue and -exchange: longstr fields (key length 1, type 1,
				// value length 4).
				want -= 3*(1+1+4) + len("x-last-death-reason") + len("delivery_limit") + len("x-last-death-queue") + len(lastQ) +
					len("x-last-death-exchange") + len(lastX)
			} else if !hasLast {
				t.Errorf("RabbitMQ %s did not add x-last-death-*", c.version)
			}
			t.Logf("RabbitMQ %s, %s, %d hops: delivered header frame %d bytes (%d redelivered, %d parked), computed %d (frame_max %d)",
				c.version, tc.name, tc.hops, under.frame+8, again.frame+8, got, computed, frameMax)
			if got != want {
				t.Errorf("parked header frame %d bytes, want exactly %d (computed %d less the %d-byte margin%s)",
					got, want, computed, deadLetterMargin, map[bool]string{true: "", false: " and x-last-death-*"}[c.addsLastDeath()])
			}
		})
	}
}

// refusalSizes checks that err wraps ErrInvalidInput and names x-death, and returns the sizes
// it gives: the published header frame, the reserve, and the frame when delivered.
func refusalSizes(t *testing.T, err error) (size, reserve, total int) {
	t.Helper()
	if !errors.Is(err, amqpdelay.ErrInvalidInput) || !strings.Contains(err.Error(), "x-death") {
		t.Fatalf("err = %v, want ErrInvalidInput naming x-death", err)
	}
	s := err.Error()
	i, j := strings.Index(s, "encode to "), strings.Index(s, "margin): ")
	if i < 0 || j < 0 {
		t.Fatalf("the refusal does not give the sizes: %v", err)
	}
	if _, e := fmt.Sscanf(s[i:], "encode to %d bytes (with this path's own headers), and %d bytes", &size, &reserve); e != nil {
		t.Fatalf("the refusal does not give the sizes (%v): %v", e, err)
	}
	if _, e := fmt.Sscanf(s[j:], "margin): %d bytes when delivered", &total); e != nil {
		t.Fatalf("the refusal does not give the delivered size (%v): %v", e, err)
	}
	return size, reserve, total
}

// snoopConsumer is a plain amqp091 consumer (manual acks, default configuration) whose
// connection records the payload size of every content-header frame it reads, in order: the
// i-th is the i-th delivery's.
type snoopConsumer struct {
	conn    *amqp.Connection
	closed  chan *amqp.Error
	version string
	ds      <-chan amqp.Delivery
	mu      sync.Mutex
	headers []int
	taken   int
}

// snooped is one delivery with the payload size of its content-header frame.
type snooped struct {
	d     amqp.Delivery
	frame int
}

func newSnoopConsumer(t *testing.T, url, queue string) *snoopConsumer {
	t.Helper()
	c := &snoopConsumer{}
	dial := amqp.DefaultDial(10 * time.Second)
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		nc, err := dial(network, addr)
		if err != nil {
			return nil, err
		}
		return &frameSnoop{Conn: nc, onHeader: c.record}, nil
	}})
	if err != nil {
		t.Fatalf("consumer: dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c.conn, c.closed = conn, conn.NotifyClose(make(chan *amqp.Error, 1))
	c.version, _ = conn.Properties["version"].(string)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("consumer: channel: %v", err)
	}
	if c.ds, err = ch.Consume(queue, "", false, false, false, false, nil); err != nil {
		t.Fatalf("consume %s: %v", queue, err)
	}
	return c
}

func (c *snoopConsumer) record(size int) {
	c.mu.Lock()
	c.headers = append(c.headers, size)
	c.mu.Unlock()
}

// next waits up to within for the next delivery.
func (c *snoopConsumer) next(t *testing.T, within time.Duration) snooped {
	t.Helper()
	select {
	case d, ok := <-c.ds:
		if !ok {
			t.Fatalf("the consumer's deliveries ended (connection: %v)", c.open())
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.taken >= len(c.headers) {
			t.Fatalf("a delivery without a content-header frame seen")
		}
		c.taken++
		return snooped{d: d, frame: c.headers[c.taken-1]}
	case <-time.After(within):
		t.Fatalf("no delivery within %v (connection: %v)", within, c.open())
	}
	panic("unreachable")
}

// open returns nil while the connection is open, else why it closed.
func (c *snoopConsumer) open() error {
	select {
	case e := <-c.closed:
		if e == nil {
			return errors.New("closed")
		}
		return e
	default:
	}
	if c.conn.IsClosed() {
		return errors.New("closed")
	}
	return nil
}

// addsLastDeath reports whether the broker's version adds x-last-death-* (3.13 and later).
func (c *snoopConsumer) addsLastDeath() bool {
	parts := strings.SplitN(c.version, ".", 3)
	if len(parts) < 2 {
		return true
	}
	major, _ := strconv.Atoi(parts[0])
	minor, _ := strconv.Atoi(parts[1])
	return major > 3 || (major == 3 && minor >= 13)
}

// frameSnoop follows the AMQP frames the broker sends (the server's stream is frames from its
// first byte: type 1, channel 2, size 4, payload, end octet) and reports the payload size of
// every content-header frame (type 2).
type frameSnoop struct {
	net.Conn
	onHeader func(size int)
	hdr      [7]byte
	have     int // bytes of hdr read
	rest     int // payload and end octet still to skip
}

func (s *frameSnoop) Read(p []byte) (int, error) {
	n, err := s.Conn.Read(p)
	for b := p[:n]; len(b) > 0; {
		if s.rest > 0 {
			k := min(s.rest, len(b))
			s.rest, b = s.rest-k, b[k:]
			continue
		}
		k := copy(s.hdr[s.have:], b)
		s.have, b = s.have+k, b[k:]
		if s.have == len(s.hdr) {
			size := int(binary.BigEndian.Uint32(s.hdr[3:7]))
			if s.hdr[0] == 2 {
				s.onHeader(size)
			}
			s.have, s.rest = 0, size+1
		}
	}
	return n, err
}
