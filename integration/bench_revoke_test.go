//go:build integration && bench

package integration

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/revoke"
)

var (
	revokeN         = flag.Int("revocations", 1_000_000, "BenchmarkRevocationsCatchUp: revocations in the stream")
	revokePerRecord = flag.Int("revoke-per-record", 100, "BenchmarkRevocationsCatchUp: ids per Revoke call (one record each)")
)

// BenchmarkRevocationsCatchUp: a stream holding -revocations revocations (36-byte UUIDs, written
// with -revoke-per-record ids per Revoke call); a new revoke.Revocations reads it all. Reported:
// its catch-up seconds and the heap it holds (MiB, after a GC), and as baseline, in the same run,
// a raw amqp091-go read of the same stream (no decoding), with the ratio of the two.
//
//	go test -tags integration,bench ./integration -run '^$' -bench RevocationsCatchUp -benchtime 1x -timeout 30m
func BenchmarkRevocationsCatchUp(b *testing.B) {
	for range b.N {
		env := brokertest.NewEnv(b)
		spec := testSpec(env, delayspec.Target{Name: env.Name("orders"), Type: "topic"})
		declareTopology(b, env, spec)
		p := newPublisher(b, env, spec)
		n, per := *revokeN, max(*revokePerRecord, 1)
		records := (n + per - 1) / per
		start := time.Now()
		each(b, records, func(ctx context.Context, r int) error {
			ids := make([]string, 0, per)
			for i := r * per; i < min((r+1)*per, n); i++ {
				ids = append(ids, uuidLike(i))
			}
			return p.Revoke(ctx, ids...)
		})
		write := time.Since(start)

		raw := rawReadStream(b, env, spec.Names().Revoked(), records)

		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		cpu0 := processCPU()
		start = time.Now()
		revs, err := revoke.New(ctx, amqpdelay.Config{URL: env.URL, Prefix: spec.Prefix}, revoke.Options{})
		catchUp := time.Since(start)
		cpu := processCPU() - cpu0
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		st := revs.Stats()
		_ = revs.Close()
		if st.Known != n {
			b.Fatalf("the reader knows %d ids, want %d", st.Known, n)
		}
		heap := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / (1 << 20)
		b.ReportMetric(catchUp.Seconds(), "catchup-s")
		b.ReportMetric(heap, "heap-MiB")
		b.ReportMetric(raw.Seconds(), "raw-read-s")
		b.ReportMetric(catchUp.Seconds()/raw.Seconds(), "catchup/raw")
		b.ReportMetric(write.Seconds(), "write-s")
		b.ReportMetric(cpu.Seconds(), "catchup-cpu-s")
		b.Logf("%d revocations in %d records (%d ids each): written in %v; raw read %v; catch-up %v (%.2f x raw; %v of this process's CPU), heap %.1f MiB",
			n, records, per, write.Round(time.Millisecond), raw.Round(time.Millisecond), catchUp.Round(time.Millisecond), catchUp.Seconds()/raw.Seconds(),
			cpu.Round(time.Millisecond), heap)
	}
}

// processCPU is the CPU time (user and system) this process has used: on a machine shared with
// other work, the reader's own cost, which wall-clock time hides.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// uuidLike returns a 36-byte id unique to i, shaped like a UUID.
func uuidLike(i int) string {
	s := strconv.FormatInt(int64(i), 16)
	return "00000000-0000-4000-8000-" + pad12(s)
}

func pad12(s string) string {
	for len(s) < 12 {
		s = "0" + s
	}
	return s
}

// rawReadStream reads records messages of stream from its start with a plain amqp091 consumer
// (prefetch 2,000, acks every 500) and returns how long it took.
func rawReadStream(b *testing.B, env *brokertest.Env, stream string, records int) time.Duration {
	conn, err := amqp.Dial(env.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Qos(2000, 0, false); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	ds, err := ch.Consume(stream, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		b.Fatal(err)
	}
	got := 0
	timeout := time.After(10 * time.Minute)
	for got < records {
		select {
		case d := <-ds:
			if got++; got%500 == 0 {
				_ = d.Ack(true)
			}
		case <-timeout:
			b.Fatalf("raw read: %d of %d records in 10 min", got, records)
		}
	}
	return time.Since(start)
}

var (
	rescheduleN      = flag.Int("reschedule", 5_000, "BenchmarkReschedule: calls per case and round")
	rescheduleRounds = flag.Int("reschedule-rounds", 3, "BenchmarkReschedule: rounds; the cases alternate within each round")
)

// BenchmarkReschedule measures what Reschedule and Revoke cost beside Publish: 8 goroutines,
// 100-byte persistent messages with ids of their own, 1 h delays on the default ladder (no hop
// of the run's messages falls due in it). Cases, alternating over -reschedule-rounds rounds of
// -reschedule calls each: raw (amqp091-go with a confirm per message to a plain quorum queue,
// in a vhost of its own per round), publish (Publisher.Publish), reschedule
// (Publisher.Reschedule of the id of a message the publish case sent: an allow record in the
// revocation stream, the new copy, then a revocation record, each confirmed before the next)
// and revoke (Publisher.Revoke of one such id per call: one record). publish, reschedule and
// revoke share one vhost and one Publisher. Reports calls/s per case and the ratio to raw
// (x_raw) in "summary"; the ratio of reschedule to publish is what a Reschedule costs in
// Publish calls.
//
//	go test -tags integration,bench ./integration -run '^$' -bench Reschedule -benchtime 1x -v
func BenchmarkReschedule(b *testing.B) {
	for range b.N {
		s := declare(b, defaultLadderCase("ladder"))
		pctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		pcfg := s.cfg
		pcfg.Strategy = amqpdelay.LadderOnly
		p, err := amqpdelay.NewPublisher(pctx, pcfg)
		cancel()
		if err != nil {
			b.Fatalf("publisher: %v", err)
		}
		b.Cleanup(func() { _ = p.Close() })
		n := *rescheduleN
		id := func(round, i int) string { return "r" + strconv.Itoa(round) + "-" + strconv.Itoa(i) }
		msg := func(round, i int) amqp.Publishing {
			m := benchPublishing(i)
			m.MessageId = id(round, i)
			return m
		}
		type tcase struct {
			name string
			call func(ctx context.Context, round, i int) error
		}
		cases := []tcase{
			{name: "raw"}, // its own vhost per round: see below
			{name: "publish", call: func(ctx context.Context, round, i int) error {
				_, err := p.Publish(ctx, benchTarget, "bench.key", msg(round, i), time.Hour)
				return err
			}},
			{name: "reschedule", call: func(ctx context.Context, round, i int) error {
				r, err := p.Reschedule(ctx, benchTarget, "bench.key", msg(round, i), time.Hour)
				if err == nil && r.MessageID != id(round, i) {
					err = fmt.Errorf("Reschedule of %q answered for id %q", id(round, i), r.MessageID)
				}
				return err
			}},
			{name: "revoke", call: func(ctx context.Context, round, i int) error {
				return p.Revoke(ctx, id(round, i))
			}},
		}
		names := make([]string, len(cases))
		for k, c := range cases {
			names[k] = c.name
		}
		took := make([]time.Duration, len(cases))
		done := make([]int, len(cases))
		alternate(b, names, *rescheduleRounds, n, "calls/s", took, done, func(b *testing.B, k, round int) time.Duration {
			c := cases[k]
			pub := func(ctx context.Context, _, i int, _ time.Duration) (time.Time, error) {
				return time.Time{}, c.call(ctx, round, i)
			}
			if c.call == nil {
				pub = rawQueue(b)
			}
			d, err := runWorkers(context.Background(), n, pub, nil, nil, func(int, time.Time) time.Duration { return time.Hour })
			if err != nil {
				b.Fatalf("%s, round %d: %v", c.name, round, err)
			}
			return d
		})
		rows := reportRates(b, names, took, done, n)
		b.Logf("Reschedule and Revoke beside Publish, %d rounds of %d calls per case, %d goroutines, 1 h delays on the default ladder:%s",
			*rescheduleRounds, n, benchWorkers, table(rows))
	}
}
