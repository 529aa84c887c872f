package revlog

import (
	"strings"
	"testing"
)

func TestEncodeDecode(t *testing.T) {
	in := []Entry{{ID: "a"}, {ID: strings.Repeat("x", 255), Keep: "k1"}, {ID: "order-42", Keep: strings.Repeat("t", MaxTagLen)}}
	body := Encode(nil, in)
	var out []Entry
	if err := Decode(body, func(id, keep []byte) { out = append(out, Entry{string(id), string(keep)}) }); err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("decoded %d entries, want %d", len(out), len(in))
	}
	for i := range in {
		if out[i] != in[i] {
			t.Errorf("entry %d: %+v, want %+v", i, out[i], in[i])
		}
	}
	for _, bad := range [][]byte{{0, 0}, {3, 'a', 'b'}, {1, 'a', 2, 'x'}} {
		if err := Decode(bad, func(id, keep []byte) {}); err == nil {
			t.Errorf("Decode(%v): no error", bad)
		}
	}
}

func TestSplit(t *testing.T) {
	e := Entry{ID: strings.Repeat("i", 200), Keep: strings.Repeat("k", 50)}
	entries := make([]Entry, 10000) // 2.52 MB
	for i := range entries {
		entries[i] = e
	}
	groups := Split(entries)
	total := 0
	for _, g := range groups {
		if n := len(Encode(nil, g)); n > MaxBody {
			t.Errorf("group of %d bytes, above %d", n, MaxBody)
		}
		total += len(g)
	}
	if len(groups) != 3 || total != len(entries) {
		t.Errorf("%d groups holding %d entries, want 3 holding %d", len(groups), total, len(entries))
	}
}
