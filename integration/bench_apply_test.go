//go:build integration && bench

package integration

import (
	"context"
	"fmt"
	"testing"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// BenchmarkApplyDefault measures apply of the default topology (15 ladder exchanges, 330
// quorum queues with the top-split order's first-hop queues) on an empty vhost with 4, 8 (the default) and 16 channels, and (again) a
// second apply with the default channels, which finds everything declared; the target is
// under 2 s
// against a local broker.
func BenchmarkApplyDefault(b *testing.B) {
	// applyDefault plans the default topology in a vhost of its own, with again applies it once
	// untimed, then applies it timed on workers channels (0: DefaultWorkers).
	applyDefault := func(b *testing.B, workers int, again bool) {
		for b.Loop() {
			b.StopTimer()
			env := brokertest.NewEnv(b)
			conn := env.Dial(b)
			p, err := admin.NewPlan(delayspec.Spec{Prefix: env.Prefix, Targets: delayspec.Targets{{Name: "orders", Type: "topic"}}, Plugin: delayspec.PluginOff})
			if err != nil {
				b.Fatal(err)
			}
			opts := admin.ApplyOptions{Workers: workers}
			if again {
				if _, err := admin.Apply(context.Background(), conn, p, opts); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			if _, err := admin.Apply(context.Background(), conn, p, opts); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("again", func(b *testing.B) { applyDefault(b, 0, true) })
	for _, workers := range []int{4, 8, 16} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { applyDefault(b, workers, false) })
	}
}
