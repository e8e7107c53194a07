package lagmeter

import (
	"errors"
	"testing"
	"time"
)

func TestByteLag(t *testing.T) {
	tests := []struct {
		primary, replay LSN
		want            uint64
		ok              bool
	}{
		{0, 0, 0, false},
		{0, 100, 0, false},
		{100, 0, 0, false},
		{100, 100, 0, true},
		{0x200000000, 0x1FFFFFFF0, 0x10, true},
		{100, 150, 0, true}, // replica past a stale primary sample
	}
	for _, tt := range tests {
		got, ok := ByteLag(tt.primary, tt.replay)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ByteLag(%v, %v) = %d, %v; want %d, %v", tt.primary, tt.replay, got, ok, tt.want, tt.ok)
		}
	}
}

func TestBudgetAllows(t *testing.T) {
	known := func(d time.Duration, n uint64) Lag { return Lag{Time: d, TimeKnown: true, Bytes: n, BytesKnown: true} }
	s := time.Second
	tests := []struct {
		name string
		b    Budget
		l    Lag
		ok   bool
		why  Reason
	}{
		{"no budget, unknown", Budget{}, Lag{}, true, ReasonNone},
		{"no budget, far behind", Budget{}, known(Unbounded, 1<<40), true, ReasonNone},
		{"time inside", Budget{MaxTime: 2 * s}, known(s, 1<<40), true, ReasonNone},
		{"time equal to the limit", Budget{MaxTime: 2 * s}, known(2*s, 0), true, ReasonNone},
		{"time over", Budget{MaxTime: 2 * s}, known(2*s+1, 0), false, ReasonBehind},
		{"time unbounded", Budget{MaxTime: time.Hour}, known(Unbounded, 0), false, ReasonBehind},
		{"time unknown", Budget{MaxTime: 2 * s}, Lag{Bytes: 0, BytesKnown: true}, false, ReasonPositionUnknown},
		{"time budget ignores unknown bytes", Budget{MaxTime: 2 * s}, Lag{Time: s, TimeKnown: true}, true, ReasonNone},
		{"bytes inside", Budget{MaxBytes: 4096}, known(Unbounded, 4096), true, ReasonNone},
		{"bytes over", Budget{MaxBytes: 4096}, known(0, 4097), false, ReasonBehind},
		{"bytes unknown", Budget{MaxBytes: 4096}, Lag{Time: 0, TimeKnown: true}, false, ReasonPositionUnknown},
		{"both inside", Budget{MaxTime: 2 * s, MaxBytes: 4096}, known(s, 10), true, ReasonNone},
		{"both, bytes over", Budget{MaxTime: 2 * s, MaxBytes: 4096}, known(s, 5000), false, ReasonBehind},
		{"both, time unknown", Budget{MaxTime: 2 * s, MaxBytes: 4096}, Lag{Bytes: 10, BytesKnown: true}, false, ReasonPositionUnknown},
		{"behind wins over unknown", Budget{MaxTime: 2 * s, MaxBytes: 4096}, Lag{Bytes: 5000, BytesKnown: true}, false, ReasonBehind},
		{"negative time admits nothing", Budget{MaxTime: -1}, known(0, 0), false, ReasonBehind},
	}
	for _, tt := range tests {
		ok, why := tt.b.Allows(tt.l)
		if ok != tt.ok || why != tt.why {
			t.Errorf("%s: Allows = %v, %q; want %v, %q", tt.name, ok, why, tt.ok, tt.why)
		}
	}
}

func TestBudgetMin(t *testing.T) {
	s := time.Second
	tests := []struct{ a, b, want Budget }{
		{Budget{}, Budget{}, Budget{}},
		{Budget{MaxTime: 2 * s}, Budget{}, Budget{MaxTime: 2 * s}},
		{Budget{}, Budget{MaxTime: 2 * s}, Budget{MaxTime: 2 * s}},
		{Budget{MaxTime: 2 * s}, Budget{MaxTime: s}, Budget{MaxTime: s}},
		{Budget{MaxTime: s}, Budget{MaxTime: 2 * s}, Budget{MaxTime: s}},
		{Budget{MaxTime: 2 * s}, Budget{MaxBytes: 10}, Budget{MaxTime: 2 * s, MaxBytes: 10}},
		{Budget{MaxBytes: 5, MaxTime: s}, Budget{MaxBytes: 10}, Budget{MaxTime: s, MaxBytes: 5}},
	}
	for _, tt := range tests {
		if got := tt.a.Min(tt.b); got != tt.want {
			t.Errorf("%+v.Min(%+v) = %+v, want %+v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestHistoryLagAndCheck(t *testing.T) {
	s := time.Second
	origin := Origin{SystemID: 42, Timeline: 3, Layout: defaultLayout}
	insert := mustLSN(t, "0/3002018") // idle on a page boundary
	h := newHistory(t, 0, origin,
		Sample{Sent: at(0), LSN: mustLSN(t, "0/3000100")},
		Sample{Sent: at(s), LSN: insert}, Sample{Sent: at(2 * s), LSN: insert})
	now := at(2500 * time.Millisecond)
	p := func(sys uint64, tli uint32, replay string) Position {
		return Position{SystemID: sys, Timeline: tli, Replay: mustLSN(t, replay)}
	}
	tests := []struct {
		name   string
		h      *History
		p      Position
		want   Lag
		budget Budget
		ok     bool
		why    Reason
	}{
		{"caught up on an idle primary", h, p(42, 3, "0/3002000"),
			Lag{Bytes: 0, BytesKnown: true, Time: 500 * time.Millisecond, TimeKnown: true},
			Budget{MaxTime: 2 * s, MaxBytes: 1}, true, ReasonNone},
		{"between samples", h, p(42, 3, "0/3001000"),
			Lag{Bytes: 0x1000, BytesKnown: true, Time: 2500 * time.Millisecond, TimeKnown: true},
			Budget{MaxTime: 2 * s}, false, ReasonBehind},
		{"between samples, byte budget", h, p(42, 3, "0/3001000"),
			Lag{Bytes: 0x1000, BytesKnown: true, Time: 2500 * time.Millisecond, TimeKnown: true},
			Budget{MaxBytes: 0x1000}, true, ReasonNone},
		{"behind every sample", h, p(42, 3, "0/2000000"),
			Lag{Bytes: 0x1002000, BytesKnown: true, Time: Unbounded, TimeKnown: true},
			Budget{MaxTime: time.Hour}, false, ReasonBehind},
		{"replay unknown", h, p(42, 3, "0/0"), Lag{}, Budget{MaxTime: time.Hour}, false, ReasonPositionUnknown},
		{"replay unknown, no budget", h, p(42, 3, "0/0"), Lag{}, Budget{}, true, ReasonNone},
		{"other system", h, p(43, 3, "0/3002000"), Lag{}, Budget{MaxBytes: 1 << 30}, false, ReasonPositionUnknown},
		{"system unknown", h, p(0, 3, "0/3002000"), Lag{}, Budget{MaxTime: time.Hour}, false, ReasonPositionUnknown},
		{"old timeline", h, p(42, 2, "0/3002000"), Lag{}, Budget{MaxTime: time.Hour}, false, ReasonPositionUnknown},
		{"timeline unknown", h, p(42, 0, "0/3002000"), Lag{}, Budget{MaxTime: time.Hour}, false, ReasonPositionUnknown},
		{"empty history", NewHistory(0), p(42, 3, "0/3002000"), Lag{}, Budget{MaxTime: time.Hour}, false, ReasonPositionUnknown},
		{"origin unknown: identity not checked", newHistory(t, 0, Origin{}, Sample{Sent: at(2 * s), LSN: 100}), p(0, 0, "0/100"),
			Lag{Bytes: 0, BytesKnown: true, Time: 500 * time.Millisecond, TimeKnown: true},
			Budget{MaxTime: s}, true, ReasonNone},
	}
	for _, tt := range tests {
		if got := tt.h.Lag(tt.p, now); got != tt.want {
			t.Errorf("%s: Lag = %+v, want %+v", tt.name, got, tt.want)
		}
		if ok, why := tt.h.Check(tt.p, tt.budget, now); ok != tt.ok || why != tt.why {
			t.Errorf("%s: Check = %v, %q; want %v, %q", tt.name, ok, why, tt.ok, tt.why)
		}
	}
}

// The gate closes by itself when the primary's probes stop, and opens again
// when they resume.
func TestCheckClosesWhenProbesStop(t *testing.T) {
	h := NewHistory(0)
	b := Budget{MaxTime: 2 * time.Second}
	p := Position{Replay: 1000}
	for i := range 5 {
		if err := h.Append(Sample{Sent: at(time.Duration(i) * time.Second), LSN: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		now time.Duration
		ok  bool
	}{{4 * time.Second, true}, {6 * time.Second, true}, {6*time.Second + 1, false}, {time.Hour, false}} {
		if ok, why := h.Check(p, b, at(tt.now)); ok != tt.ok {
			t.Errorf("at %v: Check = %v, %q; want %v", tt.now, ok, why, tt.ok)
		}
	}
	if err := h.Append(Sample{Sent: at(time.Hour), LSN: 1000}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := h.Check(p, b, at(time.Hour+time.Second)); !ok {
		t.Error("gate did not reopen after probes resumed")
	}
}

func TestReasonString(t *testing.T) {
	for r, want := range map[Reason]string{
		ReasonNone: "", ReasonBehind: "behind", ReasonPositionUnknown: "position-unknown",
		ReasonForeign: "foreign-system", ReasonDiverged: "diverged", Reason(99): "reason(99)",
	} {
		if r.String() != want {
			t.Errorf("Reason(%d).String() = %q, want %q", r, r.String(), want)
		}
		if b, _ := r.MarshalText(); string(b) != want {
			t.Errorf("Reason(%d).MarshalText() = %q", r, b)
		}
	}
}

func BenchmarkBudgetAllows(b *testing.B) {
	budget := Budget{MaxTime: 2 * time.Second, MaxBytes: 16 << 20}
	l := Lag{Time: time.Second, TimeKnown: true, Bytes: 4096, BytesKnown: true}
	b.ReportAllocs()
	for b.Loop() {
		budget.Allows(l)
	}
}

// While the primary holds WAL it has not flushed (an open transaction's
// records, or those of a transaction without an ID that rolled back after
// writing hint bits), its insert position is past what any standby can
// replay, and a history started then has no sample a caught-up replica
// reaches: by position alone it is behind every sample. The snapshot xmax
// of the newest sample, which the replica's snapshot xmin has reached,
// proves that it holds every commit acknowledged before that sample.
func TestLagUnflushedWALTransactionIDs(t *testing.T) {
	s := time.Second
	origin := Origin{SystemID: 42, Timeline: 1, Layout: defaultLayout}
	flushed := mustLSN(t, "0/509DFF8")  // where every standby is
	inserted := mustLSN(t, "0/509E610") // past it: WAL not flushed yet
	h := newHistory(t, 0, origin,
		Sample{Sent: at(0), LSN: inserted, Xmax: 750},
		Sample{Sent: at(s), LSN: inserted, Xmax: 750})
	now := at(1200 * time.Millisecond)
	b := Budget{MaxTime: 30 * s}
	p := func(xmin uint64) Position {
		return Position{SystemID: 42, Timeline: 1, Replay: flushed, Xmin: xmin}
	}
	for _, tt := range []struct {
		name string
		p    Position
		time time.Duration
		ok   bool
	}{
		{"every transaction completed there", p(750), 200 * time.Millisecond, true},
		{"past the primary's xmax (a later probe)", p(751), 200 * time.Millisecond, true},
		{"a transaction below xmax not completed there", p(749), Unbounded, false},
		{"xmin unknown", p(0), Unbounded, false},
	} {
		l := h.Lag(tt.p, now)
		if !l.TimeKnown || l.Time != tt.time || !l.BytesKnown || l.Bytes != uint64(inserted-flushed) {
			t.Errorf("%s: Lag = %+v, want time %v and %d bytes", tt.name, l, tt.time, inserted-flushed)
		}
		if ok, _ := h.Check(tt.p, b, now); ok != tt.ok {
			t.Errorf("%s: Check = %v, want %v", tt.name, ok, tt.ok)
		}
	}
	// The bound grows from the newest sample's send time: it closes the
	// gate by itself when the probes stop.
	if ok, why := h.Check(p(750), b, at(31*s+1)); ok || why != ReasonBehind {
		t.Errorf("30 s after the newest sample: Check = %v, %q; want behind", ok, why)
	}
	// The position bound still wins when it is smaller.
	if l := h.Lag(Position{SystemID: 42, Timeline: 1, Replay: inserted, Xmin: 750}, now); l.Time != 200*time.Millisecond {
		t.Errorf("replica at the newest position: Lag = %+v", l)
	}
	// The newest sample's xmax unknown: the last one known bounds it,
	// from its own send time.
	h2 := newHistory(t, 0, origin, Sample{Sent: at(0), LSN: inserted, Xmax: 750}, Sample{Sent: at(s), LSN: inserted})
	if l := h2.Lag(p(750), now); l.Time != 1200*time.Millisecond {
		t.Errorf("newest xmax unknown: Lag = %+v, want 1.2s (the older sample's)", l)
	}
	// No xmax known at all: positions only.
	h3 := newHistory(t, 0, origin, Sample{Sent: at(0), LSN: inserted}, Sample{Sent: at(s), LSN: inserted})
	if l := h3.Lag(p(750), now); l.Time != Unbounded {
		t.Errorf("no xmax known: Lag = %+v, want unbounded", l)
	}
	// A primary's xmax never goes back: a lower one is another primary's.
	if err := h.Append(Sample{Sent: at(2 * s), LSN: inserted, Xmax: 749}); !errors.Is(err, ErrLSNWentBack) {
		t.Errorf("Append with a lower xmax = %v, want ErrLSNWentBack", err)
	}
	if n, _ := h.Newest(); n.Xmax != 750 {
		t.Errorf("Newest = %+v, want its xmax kept", n)
	}
}

// A connector that started while the primary held WAL it had not flushed
// has no sample a caught-up replica reaches by position. A write then
// commits (its xmax moves past the replica's last probed xmin) before the
// replica is probed again: the newest sample's xmax is out of reach, but an
// older one's is not, and bounds the replica from that sample's send time
// (as a connector saw right after its first write: every replica behind,
// for one probe interval).
func TestLagXmaxOfAnOlderSample(t *testing.T) {
	ms := time.Millisecond
	origin := Origin{SystemID: 42, Timeline: 1, Layout: defaultLayout}
	replay := mustLSN(t, "0/401E8F0")
	h := newHistory(t, 0, origin,
		Sample{Sent: at(0), LSN: mustLSN(t, "0/401E928"), Xmax: 1168},
		Sample{Sent: at(100 * ms), LSN: mustLSN(t, "0/401E928"), Xmax: 1168},
		Sample{Sent: at(200 * ms), LSN: mustLSN(t, "0/401EAA0"), Xmax: 1169}, // the write
		Sample{Sent: at(300 * ms), LSN: mustLSN(t, "0/401EAA0")},             // xmax unknown
		Sample{Sent: at(400 * ms), LSN: mustLSN(t, "0/401EB50"), Xmax: 1170})
	now := at(450 * ms)
	b := Budget{MaxTime: time.Second}
	for _, tt := range []struct {
		name string
		xmin uint64
		time time.Duration
	}{
		{"xmin below every sample's xmax", 1167, Unbounded},
		{"xmin at the first two samples' xmax", 1168, 350 * ms},
		{"xmin at the write's xmax (the next sample's unknown)", 1169, 250 * ms},
		{"xmin at the newest xmax", 1170, 50 * ms},
	} {
		p := Position{SystemID: 42, Timeline: 1, Replay: replay, Xmin: tt.xmin}
		if l := h.Lag(p, now); !l.TimeKnown || l.Time != tt.time {
			t.Errorf("%s: Lag = %+v, want time %v", tt.name, l, tt.time)
		}
		if ok, _ := h.Check(p, b, now); ok != (tt.time != Unbounded) {
			t.Errorf("%s: Check = %v", tt.name, ok)
		}
	}
	// A replica at the newest position: the position bound, whatever its
	// xmin.
	p := Position{SystemID: 42, Timeline: 1, Replay: mustLSN(t, "0/401EB50"), Xmin: 1}
	if l := h.Lag(p, now); l.Time != 50*ms {
		t.Errorf("at the newest position: Lag = %+v, want 50ms", l)
	}
}
