package lagmeter

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestWatermarkReachedBy(t *testing.T) {
	w := Watermark{SystemID: 42, Timeline: 2, LSN: 0x5000}
	pos := func(sys uint64, tli uint32, replay LSN) Position {
		return Position{SystemID: sys, Timeline: tli, Replay: replay}
	}
	tests := []struct {
		name        string
		w           Watermark
		p           Position
		switchPoint LSN
		ok          bool
		why         Reason
	}{
		{"zero watermark", Watermark{}, Position{}, 0, true, ReasonNone},
		{"same timeline, past", w, pos(42, 2, 0x6000), 0, true, ReasonNone},
		{"same timeline, equal", w, pos(42, 2, 0x5000), 0, true, ReasonNone},
		{"same timeline, one byte short", w, pos(42, 2, 0x4FFF), 0, false, ReasonBehind},
		{"replay unknown", w, pos(42, 2, 0), 0, false, ReasonPositionUnknown},
		{"system unknown", w, pos(0, 2, 0x6000), 0, false, ReasonPositionUnknown},
		{"timeline unknown", w, pos(42, 0, 0x6000), 0, false, ReasonPositionUnknown},
		{"other system", w, pos(43, 2, 0x6000), 0, false, ReasonForeign},
		{"other system, older timeline", w, pos(43, 1, 0x6000), 0, false, ReasonForeign},
		{"incomplete watermark", Watermark{Timeline: 2, LSN: 0x5000}, pos(42, 2, 0x6000), 0, false, ReasonPositionUnknown},
		{"older timeline, even past the LSN", w, pos(42, 1, 0x9000), 0, false, ReasonBehind},
		{"newer timeline, switch point unknown", w, pos(42, 3, 0x9000), 0, false, ReasonPositionUnknown},
		{"newer timeline, write before the switch", w, pos(42, 3, 0x9000), 0x8000, true, ReasonNone},
		{"newer timeline, write exactly at the switch", w, pos(42, 3, 0x9000), 0x5000, true, ReasonNone},
		{"newer timeline, write before the switch, replica behind it", w, pos(42, 3, 0x4000), 0x8000, false, ReasonBehind},
		{"newer timeline, write after the switch: lost", w, pos(42, 3, 0x9000), 0x4FFF, false, ReasonDiverged},
		{"two timelines newer", w, pos(42, 7, 0x9000), 0x8000, true, ReasonNone},
	}
	for _, tt := range tests {
		ok, why := tt.w.ReachedBy(tt.p, tt.switchPoint)
		if ok != tt.ok || why != tt.why {
			t.Errorf("%s: ReachedBy = %v, %q; want %v, %q", tt.name, ok, why, tt.ok, tt.why)
		}
	}
}

// watermarkTexts feeds the unmarshal test, the round trip and the fuzz
// seeds. An empty err is a valid, canonical text.
var watermarkTexts = []struct {
	in  string
	w   Watermark
	err string
}{
	{"v1:0:0:0/0", Watermark{}, ""},
	{"v1:6F3A1C2B9D8E7F60:3:16/B374D848", Watermark{0x6F3A1C2B9D8E7F60, 3, 0x16B374D848}, ""},
	{"v1:1:1:0/1", Watermark{1, 1, 1}, ""},
	{"v1:FFFFFFFFFFFFFFFF:FFFFFFFF:FFFFFFFF/FFFFFFFF", Watermark{^uint64(0), ^uint32(0), ^LSN(0)}, ""},
	{"v1:2A:A:1/0", Watermark{42, 10, 1 << 32}, ""},

	{"", Watermark{}, "want v1:"},
	{"v1", Watermark{}, "found 1 fields"},
	{"v2:2A:1:0/1", Watermark{}, "unsupported version v2"},
	{"v10:2A:1:0/1", Watermark{}, "unsupported version v10"},
	{"V1:2A:1:0/1", Watermark{}, "want v1:"},
	{"x:2A:1:0/1", Watermark{}, "want v1:"},
	{"v1:2A:1", Watermark{}, "found 2 fields"},
	{"v1:2A:1:0/1:", Watermark{}, "found 4 fields"},
	{"v1:2a:1:0/1", Watermark{}, "system identifier"},
	{"v1:02A:1:0/1", Watermark{}, "system identifier"},
	{"v1::1:0/1", Watermark{}, "system identifier"},
	{"v1:10000000000000000:1:0/1", Watermark{}, "system identifier"},
	{"v1:+2A:1:0/1", Watermark{}, "system identifier"},
	{"v1:2A:100000000:0/1", Watermark{}, "timeline"},
	{"v1:2A:01:0/1", Watermark{}, "timeline"},
	{"v1:2A:-1:0/1", Watermark{}, "timeline"},
	{"v1:2A:1:1", Watermark{}, "LSN"},
	{"v1:2A:1:0/01", Watermark{}, "LSN"},
	{"v1:2A:1:/1", Watermark{}, "LSN"},
	{"v1:2A:1:0/b", Watermark{}, "LSN"},
	{"v1:2A:1:100000000/0", Watermark{}, "LSN"},
	{"v1:2A:1:0/1/2", Watermark{}, "LSN"},
	{"v1:2A:1: 0/1", Watermark{}, "LSN"},
	{"v1:2A:1:0/1 ", Watermark{}, "LSN"},
	{"v1:2A:0:0/1", Watermark{}, "incomplete"},
	{"v1:0:1:0/1", Watermark{}, "incomplete"},
	{"v1:2A:1:0/0", Watermark{}, "incomplete"},
	{"v1:" + strings.Repeat("F", 70), Watermark{}, "longer than any watermark"},
}

func TestWatermarkUnmarshalText(t *testing.T) {
	for _, tt := range watermarkTexts {
		sentinel := Watermark{SystemID: 9, Timeline: 9, LSN: 9}
		w := sentinel
		err := w.UnmarshalText([]byte(tt.in))
		if tt.err == "" {
			if err != nil || w != tt.w {
				t.Errorf("UnmarshalText(%q) = %+v, %v; want %+v", tt.in, w, err, tt.w)
				continue
			}
			b, err := w.MarshalText()
			if err != nil || string(b) != tt.in || w.String() != tt.in {
				t.Errorf("MarshalText(%+v) = %q, %v; want %q", w, b, err, tt.in)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrMalformedWatermark) || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("UnmarshalText(%q) error = %v; want one wrapping ErrMalformedWatermark mentioning %q", tt.in, err, tt.err)
		}
		if w != sentinel {
			t.Errorf("UnmarshalText(%q) changed the watermark on error: %+v", tt.in, w)
		}
	}
}

func TestWatermarkMarshalIncomplete(t *testing.T) {
	for _, w := range []Watermark{{SystemID: 1}, {Timeline: 1, LSN: 1}, {SystemID: 1, Timeline: 1}} {
		if b, err := w.MarshalText(); !errors.Is(err, ErrMalformedWatermark) {
			t.Errorf("MarshalText(%+v) = %q, %v; want an error", w, b, err)
		}
		if err := w.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", w)
		}
	}
	// AppendText appends to what it is given.
	b, err := Watermark{42, 1, 0x10}.AppendText([]byte("token="))
	if err != nil || string(b) != "token=v1:2A:1:0/10" {
		t.Fatalf("AppendText = %q, %v", b, err)
	}
}

func TestWatermarkJSON(t *testing.T) {
	w := Watermark{SystemID: 7250000000000000001, Timeline: 4, LSN: 0x3000028}
	j, err := json.Marshal(struct{ W Watermark }{w})
	if err != nil || string(j) != `{"W":"v1:649D2C967D950001:4:0/3000028"}` {
		t.Fatalf("json = %s, %v", j, err)
	}
	var back struct{ W Watermark }
	if err := json.Unmarshal(j, &back); err != nil || back.W != w {
		t.Fatalf("unmarshal = %+v, %v", back, err)
	}
}

// FuzzWatermarkUnmarshalText: no input panics; whatever is accepted is
// canonical (marshals back to the same bytes) and valid.
func FuzzWatermarkUnmarshalText(f *testing.F) {
	for _, tt := range watermarkTexts {
		f.Add([]byte(tt.in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var w Watermark
		if err := w.UnmarshalText(in); err != nil {
			if !errors.Is(err, ErrMalformedWatermark) {
				t.Fatalf("error does not wrap ErrMalformedWatermark: %v", err)
			}
			if w != (Watermark{}) {
				t.Fatalf("changed on error: %+v", w)
			}
			return
		}
		if err := w.Validate(); err != nil {
			t.Fatalf("accepted an invalid watermark %+v: %v", w, err)
		}
		out, err := w.MarshalText()
		if err != nil || string(out) != string(in) {
			t.Fatalf("round trip of %q gave %q, %v", in, out, err)
		}
		var again Watermark
		if err := again.UnmarshalText(out); err != nil || again != w {
			t.Fatalf("second round trip: %+v, %v", again, err)
		}
	})
}

// FuzzWatermarkMarshalText: every complete or zero watermark round-trips.
func FuzzWatermarkMarshalText(f *testing.F) {
	f.Add(uint64(0), uint32(0), uint64(0))
	f.Add(uint64(42), uint32(3), uint64(0x16B374D848))
	f.Fuzz(func(t *testing.T, sys uint64, tli uint32, lsn uint64) {
		w := Watermark{SystemID: sys, Timeline: tli, LSN: LSN(lsn)}
		b, err := w.MarshalText()
		if (err == nil) != (w.Validate() == nil) {
			t.Fatalf("MarshalText error %v disagrees with Validate", err)
		}
		if err != nil {
			return
		}
		var back Watermark
		if err := back.UnmarshalText(b); err != nil || back != w {
			t.Fatalf("round trip of %+v via %q: %+v, %v", w, b, back, err)
		}
	})
}

func BenchmarkWatermarkReachedBy(b *testing.B) {
	w := Watermark{SystemID: 42, Timeline: 2, LSN: 0x5000}
	p := Position{SystemID: 42, Timeline: 3, Replay: 0x9000}
	b.ReportAllocs()
	for b.Loop() {
		w.ReachedBy(p, 0x8000)
	}
}
