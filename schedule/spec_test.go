package schedule

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestValidateNamesTheField(t *testing.T) {
	ok := Schedule{Name: "bill", Interval: time.Second, Exchange: "x"}
	if err := ok.Validate(0); err != nil {
		t.Fatalf("valid schedule: %v", err)
	}
	now := time.Now()
	cases := []struct {
		name string
		s    Schedule
		want []string // each in the error
	}{
		{"invalid cron", Schedule{Name: "a", Cron: "61 * * * *", Exchange: "x"}, []string{"Cron \"61 * * * *\"", "not a valid cron expression"}},
		{"cron with too many fields", Schedule{Name: "a", Cron: "* * * * * * *", Exchange: "x"}, []string{"Cron"}},
		{"@every", Schedule{Name: "a", Cron: "@every 1m", Exchange: "x"}, []string{"Cron", "use Interval"}},
		{"unknown zone", Schedule{Name: "a", Cron: "0 1 28 * *", Zone: "Europe/Atlantis", Exchange: "x"}, []string{"Zone \"Europe/Atlantis\"", "IANA"}},
		{"interval under the unit", Schedule{Name: "a", Interval: time.Microsecond, Exchange: "x"}, []string{"Interval 1µs", "ladder's unit 1ms"}},
		{"interval under a 10 ms unit", Schedule{Name: "a", Interval: 5 * time.Millisecond, Exchange: "x"}, []string{"Interval 5ms", "unit 10ms"}},
		{"end before start", Schedule{Name: "a", Interval: time.Second, Exchange: "x", Start: now, End: now.Add(-time.Hour)}, []string{"End", "before Start"}},
		{"name with @", Schedule{Name: "a@b", Interval: time.Second, Exchange: "x"}, []string{"Name \"a@b\"", "letters, digits"}},
		{"name with a space", Schedule{Name: "monthly bill", Interval: time.Second, Exchange: "x"}, []string{"Name"}},
		{"empty name", Schedule{Interval: time.Second, Exchange: "x"}, []string{"Name is empty"}},
		{"long name", Schedule{Name: strings.Repeat("n", 101), Interval: time.Second, Exchange: "x"}, []string{"Name", "at most 100"}},
		{"neither", Schedule{Name: "a", Exchange: "x"}, []string{"neither Cron nor Interval"}},
		{"both", Schedule{Name: "a", Cron: "* * * * *", Interval: time.Second, Exchange: "x"}, []string{"both Cron"}},
		{"no exchange", Schedule{Name: "a", Interval: time.Second}, []string{"Exchange is empty"}},
		{"jitter over interval", Schedule{Name: "a", Interval: time.Second, Jitter: 2 * time.Second, Exchange: "x"}, []string{"Jitter 2s"}},
		{"own header", Schedule{Name: "a", Interval: time.Second, Exchange: "x", Message: amqp.Publishing{Headers: amqp.Table{"rabbitdelay-schedule-x": 1}}}, []string{"Message.Headers[\"rabbitdelay-schedule-x\"]"}},
		{"NaN header", Schedule{Name: "a", Interval: time.Second, Exchange: "x", Message: amqp.Publishing{Headers: amqp.Table{"f": math.NaN()}}}, []string{"Message.Headers[\"f\"] is NaN", "541"}},
		{"infinite nested header", Schedule{Name: "a", Interval: time.Second, Exchange: "x", Message: amqp.Publishing{Headers: amqp.Table{"t": amqp.Table{"g": math.Inf(1)}}}}, []string{"Message.Headers[\"t\"][\"g\"] is +Inf"}},
		{"missed policy", Schedule{Name: "a", Interval: time.Second, Exchange: "x", Missed: 7}, []string{"Missed 7"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			unit := time.Duration(0)
			if strings.Contains(tc.name, "10 ms") {
				unit = 10 * time.Millisecond
			}
			err := tc.s.Validate(unit)
			if err == nil || !errors.Is(err, ErrInvalidSchedule) {
				t.Fatalf("error %v, want ErrInvalidSchedule", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	// Every problem at once.
	err := Schedule{Name: "a b", Cron: "nope", Zone: "Nowhere/Nothing", Start: now, End: now.Add(-1)}.Validate(0)
	for _, w := range []string{"Name", "Cron", "Zone", "End", "Exchange"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("joined error %v does not name %s", err, w)
		}
	}
}

func TestOccurrenceID(t *testing.T) {
	at := time.Date(2026, 1, 28, 1, 0, 0, 0, time.FixedZone("", 3600))
	id := OccurrenceID("billing.monthly", at)
	if id != "billing.monthly@2026-01-28T00:00:00Z" {
		t.Errorf("id %q", id)
	}
	name, got, err := ParseOccurrenceID(id)
	if err != nil || name != "billing.monthly" || !got.Equal(at) {
		t.Errorf("parse: %q %v %v", name, got, err)
	}
}

func TestIntervalAndBounds(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 500e6, time.UTC)
	c := mustCompile(t, Schedule{Interval: 2 * time.Second, Start: start, End: start.Add(6 * time.Second)})
	got := occurrences(c, start.Add(-time.Hour), start.Add(time.Hour))
	want := []time.Time{start, start.Add(2 * time.Second), start.Add(4 * time.Second), start.Add(6 * time.Second)}
	if len(got) != len(want) {
		t.Fatalf("occurrences %v, want %v", got, want)
	}
	for i := range got {
		if !got[i].Equal(want[i]) {
			t.Errorf("occurrence %d: %v, want %v", i, got[i], want[i])
		}
	}
	// Without Start, anchored at the epoch: every instance computes the same times.
	c = mustCompile(t, Schedule{Interval: 2 * time.Second})
	n := c.Next(time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC))
	if !n.Equal(time.Date(2026, 1, 1, 0, 0, 2, 0, time.UTC)) {
		t.Errorf("next %v", n)
	}
	// Jitter: the same on every call, within bounds.
	c = mustCompile(t, Schedule{Interval: time.Minute, Jitter: 10 * time.Second})
	at := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	if j := c.jitter(at); j < 0 || j >= 10*time.Second || j != c.jitter(at) {
		t.Errorf("jitter %v", j)
	}
}

func TestHashStable(t *testing.T) {
	a := Schedule{Name: "a", Interval: time.Second, Exchange: "x", Message: amqp.Publishing{Body: []byte("b"), Headers: amqp.Table{"n": 1, "m": "s"}}}
	b := a
	b.Message.Headers = amqp.Table{"m": "s", "n": int64(1)}
	if a.hash() != b.hash() {
		t.Errorf("hash depends on header order or integer width")
	}
	b.Message.Body = []byte("c")
	if a.hash() == b.hash() {
		t.Errorf("hash ignores the body")
	}
}
