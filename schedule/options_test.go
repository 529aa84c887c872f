package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestOptionsDefaults: the zero Options give every default.
func TestOptionsDefaults(t *testing.T) {
	o, err := Options{}.resolve(true)
	if err != nil {
		t.Fatal(err)
	}
	if o.grace != DefaultLinkGrace || o.maxAge != DefaultRetention || o.retention != 7*24*time.Hour || o.name != "rabbitdelay-schedule" || o.instance == "" || o.metrics != nil {
		t.Errorf("resolved zero Options: %+v", o)
	}
	o, err = Options{Instance: "i1", LinkGrace: time.Second, Retention: "12h", ConnectionName: "c"}.resolve(true)
	if err != nil || o.instance != "i1" || o.grace != time.Second || o.maxAge != "12h" || o.retention != 12*time.Hour || o.name != "c" {
		t.Errorf("resolved Options: %+v, %v", o, err)
	}
}

// TestOptionsRefused: each value out of its range is refused with ErrInvalidConfig and an
// error naming the field, one per field.
func TestOptionsRefused(t *testing.T) {
	_, err := Options{Instance: strings.Repeat("i", 201), LinkGrace: 999 * time.Millisecond, Retention: "7 days"}.resolve(true)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{"Options.Instance of 201 bytes", "Options.LinkGrace 999ms: want 1s or more", `Options.Retention "7 days": want a whole number and a unit`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to say %q", err, want)
		}
	}
	if _, err := (Options{LinkGrace: -time.Second}).resolve(false); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("negative LinkGrace: %v, want ErrInvalidConfig", err)
	}
}
