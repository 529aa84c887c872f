// Package metrics holds what rabbitdelay's Prometheus metrics share: histogram buckets and the
// registration of a set of collectors. The metrics belong to the packages that measure them.
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace is the first part of every metric name: rabbitdelay_.
const Namespace = "rabbitdelay"

// LatenessBuckets are the upper bounds, in seconds, of a lateness histogram: 1 ms (the
// ladder's default unit) to 5 min (a broker outage).
var LatenessBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// DurationBuckets are the upper bounds, in seconds, of a histogram of calls (a publisher
// confirm, a handler run): 0.5 ms to 1 min.
var DurationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60}

// Register registers every collector of cs on reg, all or none; the error names the failing
// collector's metric. With share, a collector already registered with the same descriptors is
// used in its place (inEffect holds, at each index, the collector in effect); without, that is
// an error too. unregister undoes what Register added (not the shared ones).
func Register(reg prometheus.Registerer, share bool, cs ...prometheus.Collector) (inEffect []prometheus.Collector, unregister func(), err error) {
	inEffect = make([]prometheus.Collector, len(cs))
	var added []prometheus.Collector
	unregister = func() {
		for _, c := range added {
			reg.Unregister(c)
		}
	}
	for i, c := range cs {
		err := reg.Register(c)
		var are prometheus.AlreadyRegisteredError
		switch {
		case err == nil:
			inEffect[i] = c
			added = append(added, c)
			continue
		case share && errors.As(err, &are):
			inEffect[i] = are.ExistingCollector
			continue
		}
		unregister()
		return nil, func() {}, fmt.Errorf("register metric %s: %w", name(c), err)
	}
	return inEffect, unregister, nil
}

// name returns c's first descriptor.
func name(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	first, ok := <-ch
	for range ch {
	}
	if !ok {
		return "(no descriptor)"
	}
	return first.String()
}
