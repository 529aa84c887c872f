package text

import (
	"strings"
	"testing"
)

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n          int
		noun, want string
	}{
		{1, "object", "1 object"}, {0, "object", "0 objects"}, {2, "policy", "2 policies"}, {3, "key", "3 keys"},
		{1, "policy", "1 policy"}, {2, "box", "2 boxes"}, {5, "message", "5 messages"}, {2, "y", "2 ys"},
	} {
		if got := Plural(tc.n, tc.noun); got != tc.want {
			t.Errorf("Plural(%d, %q) = %q, want %q", tc.n, tc.noun, got, tc.want)
		}
	}
}

func TestSimilar(t *testing.T) {
	cands := []string{"orders", "Orders", "payments", "ord", "", "amq.topic", "orders.dlx", "ordres"}
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"ordres", []string{"orders"}},                           // a transposition (distance 2); "Orders" is 3 away
		{"orders", []string{"Orders", "ordres"}},                 // never itself
		{"order", []string{"orders", "Orders", "ord", "ordres"}}, // a letter left out, or two
		{"paymnts", []string{"payments"}},                        // one left out of a long name
		{"ord", nil},                                             // short: distance 1 only, and "ord" is itself
		{"orx", []string{"ord"}},                                 // short, distance 1
		{"shipping", nil},                                        // nothing near
		{"", nil},                                                // the default exchange is no typo
	} {
		got := Similar(tc.name, cands)
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("Similar(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

type stringer string

func (s stringer) String() string { return "<" + string(s) + ">" }

// TestJoin: Join joins the String forms; no element gives "".
func TestJoin(t *testing.T) {
	if got := Join([]stringer{"a", "b"}, ", "); got != "<a>, <b>" {
		t.Errorf("Join: %q, want %q", got, "<a>, <b>")
	}
	if got := Join([]stringer(nil), ", "); got != "" {
		t.Errorf("Join of none: %q, want empty", got)
	}
}
