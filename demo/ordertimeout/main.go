// Command ordertimeout is the demo behind `make demo`: a small shop service that schedules a
// payment time-out for each of 10,000 orders with rabbitdelay, and a plain amqp091-go consumer
// that reads the time-outs from a queue bound to the `orders` exchange when they fall due.
//
// It reads AMQPDELAY_URL and AMQPDELAY_PREFIX (the topology must be declared first: `rabbitdelay
// apply`), and AMQPDELAY_BUCKETS to send a fifth of the orders with a bucket's exact delay, shows progress while it runs, and ends with a table per delivery path:
// count, arrived, lost, early, and lateness p50, p99 and max. It exits 1 when any message is lost
// or early, 2 on bad flags.
//
//	go run ./demo/ordertimeout -orders 10000 -queue orders.payment-timeouts
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
)

type order struct {
	ID    int    `json:"order_id"`
	Event string `json:"event"`
}

// sent is what the publisher knows about one scheduled time-out.
type sent struct {
	path  amqpdelay.Path
	at    time.Time // when Publish returned (the broker had confirmed it)
	delay time.Duration
	hops  int
	due   time.Time
}

// arrival is what the consumer saw.
type arrival struct {
	at  time.Time
	due time.Time
}

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("ordertimeout", flag.ContinueOnError)
	orders := fs.Int("orders", 10000, "number of orders to schedule a payment time-out for")
	minDelay := fs.Duration("min", time.Second, "shortest time-out")
	maxDelay := fs.Duration("max", 20*time.Second, "longest time-out")
	exchange := fs.String("exchange", "orders", "target exchange (must be among AMQPDELAY_TARGETS)")
	queue := fs.String("queue", "orders.payment-timeouts", "ready queue the consumer reads (declared by `rabbitdelay apply`)")
	workers := fs.Int("publishers", 8, "goroutines publishing at once")
	grace := fs.Duration("grace", 15*time.Second, "how long after the last due time to wait for stragglers before counting them lost")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *orders < 1 || *minDelay <= 0 || *maxDelay < *minDelay || *workers < 1 {
		fmt.Fprintln(os.Stderr, "ordertimeout: want -orders >= 1, 0 < -min <= -max, -publishers >= 1")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	cfg, err := amqpdelay.ConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ordertimeout:", err)
		return 2
	}
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	p, err := amqpdelay.NewPublisher(startCtx, cfg)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ordertimeout: start the publisher:", err)
		return 1
	}
	defer p.Close()

	// The consumer: plain amqp091-go, nothing of rabbitdelay but amqpdelay.Due to measure.
	dialCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := amqpdelay.Dial(dialCtx, cfg, "ordertimeout-consumer")
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ordertimeout:", err)
		return 1
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ordertimeout: open channel:", err)
		return 1
	}
	if err := ch.Qos(500, 0, false); err != nil {
		fmt.Fprintln(os.Stderr, "ordertimeout: qos:", err)
		return 1
	}
	deliveries, err := ch.ConsumeWithContext(ctx, *queue, "", false, false, false, false, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ordertimeout: consume from queue %q (declare it with `rabbitdelay apply --ready-queue %s=%s:#`): %v\n", *queue, *queue, *exchange, err)
		return 1
	}

	var (
		mu       sync.Mutex
		sentBy   = make(map[int]sent, *orders)
		arrived  = make(map[int]arrival, *orders)
		dupes    int
		nSent    atomic.Int64
		nArrived atomic.Int64
	)
	consumerDone := make(chan struct{})
	go func() {
		defer close(consumerDone)
		for d := range deliveries {
			now := time.Now()
			var o order
			if err := json.Unmarshal(d.Body, &o); err != nil {
				_ = d.Nack(false, false)
				continue
			}
			due, _ := amqpdelay.Due(d)
			mu.Lock()
			if _, seen := arrived[o.ID]; seen {
				dupes++
			} else {
				arrived[o.ID] = arrival{at: now, due: due}
				nArrived.Add(1)
			}
			mu.Unlock()
			_ = d.Ack(false)
		}
	}()

	// The delays: about a fifth exactly equal to a declared bucket (when there are buckets in
	// range), the rest arbitrary milliseconds between -min and -max.
	var buckets []time.Duration
	for _, f := range strings.Split(os.Getenv("AMQPDELAY_BUCKETS"), ",") {
		if b, err := time.ParseDuration(strings.TrimSpace(f)); err == nil && b >= *minDelay && b <= *maxDelay {
			buckets = append(buckets, b)
		}
	}
	delays := make([]time.Duration, *orders)
	rng := rand.New(rand.NewPCG(1, 2))
	span := int64(*maxDelay-*minDelay) / int64(time.Millisecond)
	for i := range delays {
		if len(buckets) > 0 && i%5 == 0 {
			delays[i] = buckets[rng.IntN(len(buckets))]
		} else {
			delays[i] = *minDelay + time.Duration(rng.Int64N(span+1))*time.Millisecond
		}
	}

	progress := newProgress(os.Stdout)
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		tick := time.NewTicker(progress.every)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				s, a := nSent.Load(), nArrived.Load()
				progress.show(s, s-a, a, *orders)
			case <-stopProgress:
				return
			}
		}
	}()

	fmt.Printf("scheduling %d payment time-outs (%v..%v) to exchange %q with %d publishers\n", *orders, *minDelay, *maxDelay, *exchange, *workers)
	start := time.Now()
	var (
		wg       sync.WaitGroup
		next     atomic.Int64
		failures atomic.Int64
		firstErr atomic.Value
	)
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= *orders || ctx.Err() != nil {
					return
				}
				body, _ := json.Marshal(order{ID: i, Event: "payment-timeout"})
				key := fmt.Sprintf("order.%d.payment-timeout", i)
				pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				r, err := p.Publish(pctx, *exchange, key, amqp.Publishing{ContentType: "application/json", Body: body}, delays[i])
				cancel()
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				mu.Lock()
				sentBy[i] = sent{path: r.Path, at: time.Now(), delay: delays[i], hops: r.Hops, due: r.Due}
				mu.Unlock()
				nSent.Add(1)
			}
		}()
	}
	wg.Wait()
	pubTime := time.Since(start)
	progress.line(fmt.Sprintf("published %d in %v (%.0f msg/s)", nSent.Load(), pubTime.Round(time.Millisecond), float64(nSent.Load())/pubTime.Seconds()))
	if n := failures.Load(); n > 0 {
		progress.line(fmt.Sprintf("%d publishes failed; first error: %v", n, firstErr.Load()))
	}

	// Wait until everything arrived, or until the last due time plus the grace period.
	var lastDue time.Time
	mu.Lock()
	for _, s := range sentBy {
		if s.due.After(lastDue) {
			lastDue = s.due
		}
	}
	mu.Unlock()
	deadline := time.NewTimer(time.Until(lastDue.Add(*grace)))
	defer deadline.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
wait:
	for nArrived.Load() < nSent.Load() {
		select {
		case <-poll.C:
		case <-deadline.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	// A moment more to catch duplicates or strays, then stop.
	time.Sleep(200 * time.Millisecond)
	close(stopProgress)
	<-progressDone
	s, a := nSent.Load(), nArrived.Load()
	progress.show(s, s-a, a, *orders)
	progress.done()
	_ = ch.Close()
	<-consumerDone

	mu.Lock()
	defer mu.Unlock()
	bad := report(os.Stdout, sentBy, arrived, dupes, time.Since(start))
	if failures.Load() > 0 {
		bad = true
	}
	if bad {
		fmt.Println("FAIL: messages were lost, early or not published")
		return 1
	}
	fmt.Println("OK: every time-out arrived, none early")
	return 0
}

// report prints the per-path table and returns true when anything was lost or early.
func report(w io.Writer, sentBy map[int]sent, arrived map[int]arrival, dupes int, total time.Duration) bool {
	type stats struct {
		count, arrived, lost, early int
		late                        []time.Duration
	}
	byPath := map[amqpdelay.Path]*stats{}
	var paths []amqpdelay.Path
	for id, s := range sentBy {
		st := byPath[s.path]
		if st == nil {
			st = &stats{}
			byPath[s.path] = st
			paths = append(paths, s.path)
		}
		st.count++
		a, ok := arrived[id]
		if !ok {
			st.lost++
			continue
		}
		st.arrived++
		if a.at.Before(s.due) {
			st.early++
		}
		st.late = append(st.late, a.at.Sub(s.due))
	}
	slices.Sort(paths)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tcount\tarrived\tlost\tearly\tlate p50\tlate p99\tlate max\t")
	bad := false
	for _, p := range paths {
		st := byPath[p]
		sort.Slice(st.late, func(i, j int) bool { return st.late[i] < st.late[j] })
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", p, st.count, st.arrived, st.lost, st.early,
			ms(pct(st.late, 0.50)), ms(pct(st.late, 0.99)), ms(pct(st.late, 1)))
		if st.lost > 0 || st.early > 0 {
			bad = true
		}
	}
	_ = tw.Flush()
	// One message of each path, the one with the lowest id, as a single time line.
	for _, p := range paths {
		id := -1
		for i, s := range sentBy {
			if s.path == p && (id < 0 || i < id) {
				id = i
			}
		}
		s := sentBy[id]
		a, ok := arrived[id]
		hops := "hops"
		if s.hops == 1 {
			hops = "hop"
		}
		line := fmt.Sprintf("for example order %d: delay %v by the %s path (%d %s), publish confirmed %s, due %s, ", id,
			s.delay, p, s.hops, hops, s.at.Format("15:04:05.000"), s.due.Format("15:04:05.000"))
		if ok {
			line += fmt.Sprintf("arrived %s (%s after due)", a.at.Format("15:04:05.000"), ms(a.at.Sub(s.due)))
		} else {
			line += "not arrived"
		}
		fmt.Fprintln(w, line)
	}
	if dupes > 0 {
		fmt.Fprintf(w, "%d duplicate deliveries (at-least-once dead-lettering may redeliver after a broker failure)\n", dupes)
	}
	fmt.Fprintf(w, "total run time %v\n", total.Round(time.Millisecond))
	return bad
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// progress shows published / pending / arrived on one updating line on a terminal, and as
// plain lines every few seconds otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	every time.Duration
	dirty bool
}

func newProgress(f *os.File) *progress {
	tty := false
	if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		tty = true
	}
	p := &progress{w: f, tty: tty, every: 2 * time.Second}
	if tty {
		p.every = 200 * time.Millisecond
	}
	return p
}

func (p *progress) show(published, pending, arrived int64, total int) {
	msg := fmt.Sprintf("published %d/%d  pending %d  arrived %d", published, total, pending, arrived)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", msg)
		p.dirty = true
		return
	}
	fmt.Fprintln(p.w, msg)
}

func (p *progress) line(s string) {
	if p.tty && p.dirty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintln(p.w, s)
	p.dirty = false
}

func (p *progress) done() {
	if p.tty && p.dirty {
		fmt.Fprintln(p.w)
		p.dirty = false
	}
}
