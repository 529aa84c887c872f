package amqpdelay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/plugin"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

func mustBuckets(t *testing.T, ds ...time.Duration) ttlbuckets.Buckets {
	t.Helper()
	b, err := ttlbuckets.NewBuckets(ds...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestChoosePath is the path table of docs/how-it-works.md, row by row.
func TestChoosePath(t *testing.T) {
	ms := time.Millisecond
	defLadder := ttlbuckets.Ladder{}.WithDefaults()                                      // 1 ms unit, max 2^32-1 ms
	coarse := ttlbuckets.Ladder{Unit: time.Second, Radix: 16, Max: 100 * 24 * time.Hour} // 1 s unit, 100 days
	short := ttlbuckets.Ladder{Unit: ms, Radix: 16, Max: time.Hour}.WithDefaults()       // max 1 h
	buckets := mustBuckets(t, 30*time.Second, 5*time.Minute)
	cases := []struct {
		name      string
		ladder    ttlbuckets.Ladder
		strategy  Strategy
		plugin    bool
		d         time.Duration
		want      Path
		effective time.Duration
		rounded   bool
		err       error
	}{
		{name: "zero delay is direct", ladder: defLadder, d: 0, want: PathDirect},
		{name: "negative delay is direct", ladder: defLadder, d: -time.Hour, want: PathDirect},
		{name: "negative delay is direct even plugin-only without plugin", ladder: defLadder, strategy: PluginOnly, d: -1, want: PathDirect},
		{name: "bucket match", ladder: defLadder, d: 30 * time.Second, want: PathBucket, effective: 30 * time.Second},
		{name: "bucket before plugin with prefer-plugin", ladder: defLadder, strategy: PreferPlugin, plugin: true, d: 5 * time.Minute, want: PathBucket, effective: 5 * time.Minute},
		{name: "bucket with ladder-only", ladder: defLadder, strategy: LadderOnly, d: 30 * time.Second, want: PathBucket, effective: 30 * time.Second},
		{name: "plugin-only skips buckets", ladder: defLadder, strategy: PluginOnly, plugin: true, d: 30 * time.Second, want: PathPlugin, effective: 30 * time.Second},
		{name: "auto exact ladder even with plugin", ladder: defLadder, plugin: true, d: 1500 * ms, want: PathLadder, effective: 1500 * ms},
		{name: "auto exact ladder without plugin", ladder: defLadder, d: 90 * time.Minute, want: PathLadder, effective: 90 * time.Minute},
		{name: "auto not whole unit goes to plugin", ladder: coarse, plugin: true, d: 1500 * ms, want: PathPlugin, effective: 1500 * ms},
		{name: "auto not whole unit rounds up on ladder without plugin", ladder: coarse, d: 1500 * ms, want: PathLadder, effective: 2 * time.Second, rounded: true},
		{name: "auto sub-ms with plugin stays on a 1 ms ladder", ladder: defLadder, plugin: true, d: 1500*ms + 1, want: PathLadder, effective: 1501 * ms, rounded: true},
		{name: "auto sub-ms below one unit stays on a 1 ms ladder", ladder: defLadder, plugin: true, d: ms / 2, want: PathLadder, effective: ms, rounded: true},
		{name: "auto 10 ms ladder, whole ms not a unit, goes to plugin", ladder: ttlbuckets.Ladder{Unit: 10 * ms, Radix: 16}, plugin: true, d: 1505 * ms, want: PathPlugin, effective: 1505 * ms},
		{name: "auto 10 ms ladder, sub-ms rounding to a unit, stays on the ladder", ladder: ttlbuckets.Ladder{Unit: 10 * ms, Radix: 16}, plugin: true, d: 1509*ms + 1, want: PathLadder, effective: 1510 * ms, rounded: true},
		{name: "auto sub-ms above ladder max goes to plugin", ladder: short, plugin: true, d: 2*time.Hour + 1, want: PathPlugin, effective: 2*time.Hour + ms, rounded: true},
		{name: "auto sub-ms just below the default max stays on the ladder", ladder: defLadder, plugin: true, d: ttlbuckets.DefaultMax - ms/2, want: PathLadder, effective: ttlbuckets.DefaultMax, rounded: true},
		{name: "auto max not a whole unit: the max itself goes to the plugin", ladder: ttlbuckets.Ladder{Unit: 10 * ms, Radix: 16, Max: 1005 * ms}, plugin: true, d: 1005 * ms, want: PathPlugin, effective: 1005 * ms},
		{name: "auto sub-ms just above the default max fits neither", ladder: defLadder, plugin: true, d: ttlbuckets.DefaultMax + ms/2, err: ErrDelayTooLong},
		{name: "auto sub-ms without plugin rounds up on ladder", ladder: defLadder, d: 1500*ms + 1, want: PathLadder, effective: 1501 * ms, rounded: true},
		{name: "auto above ladder max goes to plugin", ladder: short, plugin: true, d: 2 * time.Hour, want: PathPlugin, effective: 2 * time.Hour},
		{name: "auto above ladder max without plugin", ladder: short, d: 2 * time.Hour, err: ErrDelayTooLong},
		{name: "auto above both", ladder: short, plugin: true, d: plugin.MaxDelay + ms, err: ErrDelayTooLong},
		{name: "auto coarse ladder beyond plugin max rounds up", ladder: coarse, plugin: true, d: plugin.MaxDelay + 1500*ms, want: PathLadder, effective: 4294969 * time.Second, rounded: true},
		{name: "prefer-plugin takes exact delays too", ladder: defLadder, strategy: PreferPlugin, plugin: true, d: 1500 * ms, want: PathPlugin, effective: 1500 * ms},
		{name: "prefer-plugin without plugin uses ladder", ladder: defLadder, strategy: PreferPlugin, d: 1500 * ms, want: PathLadder, effective: 1500 * ms},
		{name: "prefer-plugin beyond plugin max uses ladder", ladder: coarse, strategy: PreferPlugin, plugin: true, d: 60 * 24 * time.Hour, want: PathLadder, effective: 60 * 24 * time.Hour},
		{name: "plugin-only without plugin", ladder: defLadder, strategy: PluginOnly, d: time.Second, err: ErrPluginUnavailable},
		{name: "plugin-only beyond plugin max", ladder: coarse, strategy: PluginOnly, plugin: true, d: 60 * 24 * time.Hour, err: ErrDelayTooLong},
		{name: "plugin-only sub-ms rounds up", ladder: defLadder, strategy: PluginOnly, plugin: true, d: ms / 2, want: PathPlugin, effective: ms, rounded: true},
		{name: "ladder-only never plugin", ladder: coarse, strategy: LadderOnly, plugin: true, d: 1500 * ms, want: PathLadder, effective: 2 * time.Second, rounded: true},
		{name: "ladder-only above max", ladder: short, strategy: LadderOnly, plugin: true, d: 2 * time.Hour, err: ErrDelayTooLong},
		{name: "ladder max exactly", ladder: short, d: time.Hour, want: PathLadder, effective: time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := chooser{ladder: tc.ladder.WithDefaults(), buckets: buckets, strategy: tc.strategy, pluginOK: tc.plugin}
			got, err := c.choose(tc.d)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("choose(%v) error = %v, want %v", tc.d, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("choose(%v): %v", tc.d, err)
			}
			if got.path != tc.want || got.effective != tc.effective || got.rounded != tc.rounded {
				t.Errorf("choose(%v) = %v, %v, rounded %v; want %v, %v, rounded %v",
					tc.d, got.path, got.effective, got.rounded, tc.want, tc.effective, tc.rounded)
			}
			if got.effective < tc.d {
				t.Errorf("effective %v < requested %v: the message would be early", got.effective, tc.d)
			}
			switch got.path {
			case PathLadder:
				if got.plan.Effective != got.effective || got.plan.Entry < 0 {
					t.Errorf("ladder plan %+v does not match", got.plan)
				}
			case PathPlugin:
				if time.Duration(got.pluginMs)*ms != got.effective {
					t.Errorf("x-delay %d ms, effective %v", got.pluginMs, got.effective)
				}
			case PathBucket:
				if got.bucketTTL != got.effective.Milliseconds() {
					t.Errorf("bucket TTL %d ms, effective %v", got.bucketTTL, got.effective)
				}
			}
		})
	}
}

func TestDelayTooLongStatesMaximum(t *testing.T) {
	short := ttlbuckets.Ladder{Unit: time.Millisecond, Radix: 16, Max: time.Hour}.WithDefaults()
	_, err := chooser{ladder: short}.choose(2 * time.Hour)
	if !errors.Is(err, ErrDelayTooLong) || !errors.Is(err, ttlbuckets.ErrDelayTooLong) {
		t.Fatalf("err = %v, want ErrDelayTooLong (and ttlbuckets'))", err)
	}
	if strings.Count(err.Error(), "1h0m0s") != 1 || strings.Count(err.Error(), "too long") != 1 {
		t.Errorf("error %q does not state the maximum 1h0m0s, once", err)
	}
	_, err = chooser{ladder: short, pluginOK: true}.choose(plugin.MaxDelay + time.Hour)
	if strings.Count(err.Error(), plugin.MaxDelay.String()) != 1 {
		t.Errorf("error %q does not state the plugin's maximum %v, once", err, plugin.MaxDelay)
	}
}

func TestPluginMissingErrorSaysWhy(t *testing.T) {
	_, err := chooser{ladder: ttlbuckets.Ladder{}.WithDefaults(), strategy: PluginOnly}.choose(time.Second)
	if !errors.Is(err, ErrPluginUnavailable) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"rabbitmq_delayed_message_exchange", "rabbitdelay apply --plugin on"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestPluginMissingErrorNames43: on RabbitMQ 4.3 and later the error says the plugin cannot run
// there and points at the ladder; before 4.3 it points at the plugin and `rabbitdelay apply`.
func TestPluginMissingErrorNames43(t *testing.T) {
	for _, tc := range []struct {
		version string
		gone    bool
	}{{"3.10.8", false}, {"4.0.5", false}, {"4.2.4", false}, {"4.3.0", true}, {"4.3.6", true}, {"4.10.1", true}, {"5.0.0", true}, {"", false}, {"unknown", false}} {
		_, err := chooser{ladder: ttlbuckets.Ladder{}.WithDefaults(), strategy: PluginOnly, brokerVersion: tc.version}.choose(time.Second)
		if !errors.Is(err, ErrPluginUnavailable) {
			t.Fatalf("%s: err = %v", tc.version, err)
		}
		names43 := strings.Contains(err.Error(), "cannot load the delayed-message plugin") && strings.Contains(err.Error(), "RabbitMQ 4.3") && strings.Contains(err.Error(), "RabbitMQ "+tc.version)
		if names43 != tc.gone || tc.gone && !strings.Contains(err.Error(), "LadderOnly") {
			t.Errorf("%s: error %q; want it to name 4.3: %v", tc.version, err, tc.gone)
		}
	}
}

func TestPathAndStrategyStrings(t *testing.T) {
	for p, want := range map[Path]string{PathDirect: "direct", PathBucket: "bucket", PathLadder: "ladder", PathPlugin: "plugin", Path(9): "Path(9)"} {
		if p.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(p), p.String(), want)
		}
	}
	for s, want := range map[Strategy]string{Auto: "auto", PreferPlugin: "prefer-plugin", PluginOnly: "plugin-only", LadderOnly: "ladder-only"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(s), s.String(), want)
		}
	}
}

func BenchmarkChoose(b *testing.B) {
	c := chooser{ladder: ttlbuckets.Ladder{}.WithDefaults(), buckets: mustBucketsB(b, 30*time.Second)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.choose(90 * time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

func mustBucketsB(b *testing.B, ds ...time.Duration) ttlbuckets.Buckets {
	bk, err := ttlbuckets.NewBuckets(ds...)
	if err != nil {
		b.Fatal(err)
	}
	return bk
}
