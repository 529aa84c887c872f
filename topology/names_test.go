package topology

import (
	"fmt"
	"testing"
)

// TestNamesSpelling: the ladder's and buckets' names are built without fmt (the Publisher names them on every
// publish); they must stay the names `declare apply` has always declared.
func TestNamesSpelling(t *testing.T) {
	d, p := Names{}, Names{Prefix: "app.delays"}
	for _, c := range []struct{ got, want string }{
		{d.LadderExchange(0), "rabbitdelay.ladder.00"},
		{d.LadderExchange(12), "rabbitdelay.ladder.12"},
		{d.LadderQueue(3, 7), "rabbitdelay.ladder.03.07"},
		{p.LadderQueue(10, 63), "app.delays.ladder.10.63"},
		{d.LadderExchangeCopy(5, 0), "rabbitdelay.ladder.05"},
		{d.LadderExchangeCopy(5, 11), "rabbitdelay.ladder.05.s11"},
		{d.LadderQueueCopy(0, 1, 0), "rabbitdelay.ladder.00.01"},
		{d.LadderQueueCopy(0, 1, 2), "rabbitdelay.ladder.00.01.s2"},
		{p.LadderLastHopQueueCopy(7, 15, 3), "app.delays.ladder.07.15.s3.last"},
		{d.LadderLastHopExchangeCopy(2, 0), "rabbitdelay.ladder.02.last"},
		{d.BucketQueue(90_000), "rabbitdelay.bucket.90000ms"},
		{p.BucketQueue(1), "app.delays.bucket.1ms"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	for level := range 20 {
		for digit := range 130 {
			for shard := range 4 {
				want := fmt.Sprintf("rabbitdelay.ladder.%02d.%02d", level, digit)
				if shard > 0 {
					want += fmt.Sprintf(".s%d", shard)
				}
				if got := d.LadderQueueCopy(level, digit, shard); got != want {
					t.Fatalf("LadderQueueCopy(%d, %d, %d) = %q, want %q", level, digit, shard, got, want)
				}
			}
		}
	}
}
