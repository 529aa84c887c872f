package revoke

import (
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/revlog"
)

// BenchmarkApply: the reader's own work for 1,000,000 revocations, 100 per record (no broker).
func BenchmarkApply(b *testing.B) {
	recs := make([]amqp.Delivery, 10000)
	for i := range recs {
		es := make([]revlog.Entry, 100)
		for j := range es {
			es[j].ID = "00000000-0000-4000-8000-" + strconv.FormatInt(int64(1e11+i*100+j), 16)
		}
		recs[i] = record(time.Now(), es...)
	}
	for range b.N {
		r := reader()
		start := time.Now()
		for k := range recs {
			r.apply(&recs[k])
		}
		b.ReportMetric(time.Since(start).Seconds(), "s/1M")
	}
}
