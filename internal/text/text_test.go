package text

import "testing"

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
