package lagmeter

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// t0 is the injected clock's origin; tests never read the real clock.
var t0 = time.Unix(1_700_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

// defaultLayout is initdb's on a 64-bit server.
var defaultLayout = WALLayout{BlockSize: 8192, SegmentSize: 16 << 20, MaxAlign: 8}

func mustLSN(t testing.TB, s string) LSN {
	t.Helper()
	l, err := ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newHistory(t testing.TB, capacity int, o Origin, samples ...Sample) *History {
	t.Helper()
	h := NewHistory(capacity)
	if err := h.Reset(o); err != nil {
		t.Fatal(err)
	}
	for _, s := range samples {
		if err := h.Append(s); err != nil {
			t.Fatalf("Append(%v): %v", s, err)
		}
	}
	return h
}

func TestStalenessBound(t *testing.T) {
	s := time.Second
	rising := []Sample{{Sent: at(0), LSN: 100}, {Sent: at(1 * s), LSN: 200}, {Sent: at(2 * s), LSN: 300}}
	idle := []Sample{{Sent: at(0), LSN: 500}, {Sent: at(1 * s), LSN: 500}, {Sent: at(2 * s), LSN: 500}, {Sent: at(3 * s), LSN: 500}}
	tests := []struct {
		name    string
		samples []Sample
		replay  LSN
		now     time.Time
		want    time.Duration
		ok      bool
	}{
		{"empty history", nil, 100, at(s), 0, false},
		{"replay unknown", rising, 0, at(3 * s), 0, false},
		{"behind the oldest sample", rising, 99, at(3 * s), 0, false},
		{"exactly at the oldest sample", rising, 100, at(3 * s), 3 * s, true},
		{"between samples", rising, 150, at(3 * s), 3 * s, true},
		{"one byte short of a sample", rising, 199, at(3 * s), 3 * s, true},
		{"exactly at a middle sample", rising, 200, at(3 * s), 2 * s, true},
		{"exactly at the newest sample", rising, 300, at(3 * s), 1 * s, true},
		{"past the newest sample", rising, 1 << 40, at(3 * s), 1 * s, true},
		{"idle primary, caught up: the newest equal sample counts", idle, 500, at(3500 * time.Millisecond), 500 * time.Millisecond, true},
		{"idle primary, one byte short", idle, 499, at(4 * s), 0, false},
		{"bound grows while no sample comes", rising, 300, at(60 * s), 58 * s, true},
		{"sample sent after now", rising, 300, at(s), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHistory(t, 0, Origin{}, tt.samples...)
			got, ok := h.StalenessBound(tt.replay, tt.now)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("StalenessBound(%v, %v) = %v, %v; want %v, %v", tt.replay, tt.now.Sub(t0), got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestLagFloor(t *testing.T) {
	s := time.Second
	ms := time.Millisecond
	rising := []Sample{{Sent: at(0), LSN: 100}, {Sent: at(1 * s), LSN: 200}, {Sent: at(2 * s), LSN: 300}}
	tests := []struct {
		name   string
		replay LSN
		at     time.Time
		rtt    time.Duration
		want   time.Duration
		ok     bool
	}{
		{"replay unknown", 0, at(3 * s), 0, 0, false},
		{"caught up with the newest sample", 300, at(3 * s), 0, 0, false},
		{"past the newest sample", 1 << 40, at(3 * s), 0, 0, false},
		{"behind the newest sample only", 250, at(2500 * ms), 0, 500 * ms, true},
		{"behind two samples: the oldest one past it counts", 150, at(2500 * ms), 0, 1500 * ms, true},
		{"the round trip is taken off", 150, at(2500 * ms), 100 * ms, 1400 * ms, true},
		{"behind every sample", 50, at(2500 * ms), 0, 2500 * ms, true},
		{"not positive", 250, at(2 * s), 10 * ms, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHistory(t, 0, Origin{}, rising...)
			got, ok := h.LagFloor(tt.replay, tt.at, tt.rtt)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("LagFloor(%d, %v, %v) = %v, %v; want %v, %v", tt.replay, tt.at.Sub(t0), tt.rtt, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestStalenessBoundZeroHistory(t *testing.T) {
	var h History
	if _, ok := h.StalenessBound(1, t0); ok {
		t.Fatal("zero History gave a bound")
	}
	if h.Len() != 0 || h.Capacity() != DefaultCapacity {
		t.Fatalf("zero History: len %d, capacity %d", h.Len(), h.Capacity())
	}
	if _, ok := h.Newest(); ok {
		t.Fatal("zero History has a newest sample")
	}
	if err := h.Append(Sample{Sent: at(0), LSN: 10}); err != nil {
		t.Fatal(err)
	}
	if d, ok := h.StalenessBound(10, at(time.Second)); !ok || d != time.Second {
		t.Fatalf("after one append: %v, %v", d, ok)
	}
}

// A caught-up replica of an idle primary whose insert position sits just
// past a page header: its replay position is the page boundary.
func TestStalenessBoundIdleAtPageBoundary(t *testing.T) {
	s := time.Second
	tests := []struct {
		name           string
		layout         WALLayout
		insert, replay string
		ok             bool
	}{
		{"short header", defaultLayout, "0/3002018", "0/3002000", true},
		{"long header after pg_switch_wal", defaultLayout, "0/3000028", "0/3000000", true},
		{"high bits", defaultLayout, "1A/FF000028", "1A/FF000000", true},
		{"replay equal to the insert position", defaultLayout, "0/3002018", "0/3002018", true},
		{"unknown layout: conservative", WALLayout{}, "0/3002018", "0/3002000", false},
		{"40 bytes into an ordinary page is a record tail", defaultLayout, "0/3002028", "0/3002000", false},
		{"24 bytes into a segment's first page is inside its header", defaultLayout, "0/3000018", "0/3000000", false},
		{"one byte short of the boundary", defaultLayout, "0/3002018", "0/3001FFF", false},
		{"4-byte alignment: short header is 20", WALLayout{8192, 16 << 20, 4}, "0/3002014", "0/3002000", true},
		{"4-byte alignment: 24 is a record tail", WALLayout{8192, 16 << 20, 4}, "0/3002018", "0/3002000", false},
		{"larger segments: 16 MB multiple is an ordinary page", WALLayout{8192, 64 << 20, 8}, "0/3000028", "0/3000000", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			insert := mustLSN(t, tt.insert)
			h := newHistory(t, 0, Origin{Layout: tt.layout},
				Sample{Sent: at(0), LSN: insert}, Sample{Sent: at(s), LSN: insert}, Sample{Sent: at(2 * s), LSN: insert})
			d, ok := h.StalenessBound(mustLSN(t, tt.replay), at(2500*time.Millisecond))
			if ok != tt.ok || (ok && d != 500*time.Millisecond) {
				t.Fatalf("bound = %v, %v; want ok %v (500ms)", d, ok, tt.ok)
			}
			if n, _ := h.Newest(); n.LSN != insert {
				t.Fatalf("Newest().LSN = %v, want the sampled %v", n.LSN, insert)
			}
		})
	}
}

func TestAppendRules(t *testing.T) {
	s := time.Second
	h := newHistory(t, 0, Origin{}, Sample{Sent: at(s), LSN: 100}, Sample{Sent: at(2 * s), LSN: 200})
	for _, tt := range []struct {
		name string
		s    Sample
		err  error
	}{
		{"zero LSN", Sample{Sent: at(3 * s), LSN: 0}, ErrInvalidSample},
		{"zero time", Sample{Sent: time.Time{}, LSN: 300}, ErrInvalidSample},
		{"sent before the newest", Sample{Sent: at(1500 * time.Millisecond), LSN: 300}, ErrOutOfOrder},
		{"LSN went back", Sample{Sent: at(3 * s), LSN: 199}, ErrLSNWentBack},
	} {
		if err := h.Append(tt.s); !errors.Is(err, tt.err) {
			t.Errorf("%s: Append = %v, want %v", tt.name, err, tt.err)
		}
	}
	if h.Len() != 2 {
		t.Fatalf("rejected samples were recorded: %v", h.Samples(nil))
	}
	// Equal send time and equal LSN are fine.
	if err := h.Append(Sample{Sent: at(2 * s), LSN: 200}); err != nil {
		t.Fatal(err)
	}
	// A rejected sample leaves the bound growing: the gate closes by itself.
	if d, ok := h.StalenessBound(200, at(30*s)); !ok || d != 28*s {
		t.Fatalf("bound = %v, %v", d, ok)
	}
}

// After a failover the new primary's positions can be lower: Reset, then its
// samples count and the old ones are gone.
func TestReset(t *testing.T) {
	s := time.Second
	h := newHistory(t, 0, Origin{SystemID: 7, Timeline: 1},
		Sample{Sent: at(0), LSN: 1000}, Sample{Sent: at(s), LSN: 2000})
	if err := h.Append(Sample{Sent: at(2 * s), LSN: 1500}); !errors.Is(err, ErrLSNWentBack) {
		t.Fatalf("Append on another history without Reset: %v", err)
	}
	if err := h.Reset(Origin{SystemID: 7, Timeline: 2, Layout: defaultLayout}); err != nil {
		t.Fatal(err)
	}
	if o := h.Origin(); o.Timeline != 2 || o.Layout != defaultLayout {
		t.Fatalf("Origin = %+v", o)
	}
	if _, ok := h.StalenessBound(2000, at(2*s)); ok || h.Len() != 0 {
		t.Fatal("samples of the old primary survived Reset")
	}
	if err := h.Append(Sample{Sent: at(2 * s), LSN: 1500}); err != nil {
		t.Fatal(err)
	}
	if d, ok := h.StalenessBound(1500, at(3*s)); !ok || d != s {
		t.Fatalf("after Reset: %v, %v", d, ok)
	}
	if _, ok := h.StalenessBound(1499, at(3*s)); ok {
		t.Fatal("a replica behind the new primary's first sample has a bound")
	}

	// An invalid layout resets anyway, with the unknown layout.
	if err := h.Reset(Origin{Timeline: 3, Layout: WALLayout{BlockSize: 1000}}); err == nil {
		t.Fatal("invalid layout accepted")
	}
	if o := h.Origin(); o.Timeline != 3 || !o.Layout.IsZero() || h.Len() != 0 {
		t.Fatalf("after Reset with an invalid layout: %+v, %d samples", o, h.Len())
	}
}

// Dropping old samples makes an old replica unknown, never fresh.
func TestCapacityOverflow(t *testing.T) {
	const capacity = 4
	h := NewHistory(capacity)
	for i := 1; i <= 11; i++ {
		if err := h.Append(Sample{Sent: at(time.Duration(i) * time.Second), LSN: LSN(100 * i)}); err != nil {
			t.Fatal(err)
		}
		if h.Len() != min(i, capacity) {
			t.Fatalf("after %d appends Len = %d", i, h.Len())
		}
	}
	got := h.Samples(nil)
	for i, s := range got {
		if want := LSN(100 * (8 + i)); s.LSN != want || !s.Sent.Equal(at(time.Duration(8+i)*time.Second)) {
			t.Fatalf("Samples()[%d] = %v, want LSN %v", i, s, want)
		}
	}
	now := at(12 * time.Second)
	if d, ok := h.StalenessBound(150, now); ok {
		t.Fatalf("replica older than the kept history got bound %v", d)
	}
	if d, ok := h.StalenessBound(799, now); ok {
		t.Fatalf("replica just behind the oldest kept sample got bound %v", d)
	}
	if d, ok := h.StalenessBound(800, now); !ok || d != 4*time.Second {
		t.Fatalf("replica at the oldest kept sample: %v, %v", d, ok)
	}
	if NewHistory(-1).Capacity() != DefaultCapacity || NewHistory(1).Capacity() != 1 {
		t.Fatal("capacity defaults")
	}
}

// The binary search against a linear scan of every sample appended, over
// random histories, capacities and replay positions.
func TestStalenessBoundMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		capacity := 1 + r.IntN(9)
		h := NewHistory(capacity)
		var all []Sample
		lsn, sent := LSN(1+r.IntN(50)), at(0)
		for range r.IntN(40) {
			s := Sample{Sent: sent, LSN: lsn}
			if err := h.Append(s); err != nil {
				t.Fatal(err)
			}
			all = append(all, s)
			lsn += LSN(r.IntN(3) * r.IntN(20)) // often equal
			sent = sent.Add(time.Duration(r.IntN(3)) * time.Second)
		}
		kept := all[max(0, len(all)-capacity):]
		now := sent.Add(time.Second)
		for replay := LSN(0); replay < lsn+10; replay++ {
			var want time.Duration
			ok := false
			for _, s := range kept {
				if replay != 0 && s.LSN <= replay {
					want, ok = now.Sub(s.Sent), true
				}
			}
			got, gotOK := h.StalenessBound(replay, now)
			if got != want || gotOK != ok {
				t.Fatalf("round %d, capacity %d, samples %v, replay %v: got %v, %v; want %v, %v",
					round, capacity, kept, replay, got, gotOK, want, ok)
			}
		}
	}
}

// One appender, several readers, Resets in between; run with -race. Sample
// i has LSN 10*i and was sent at t0 + i ms, so a reader can check every
// answer it gets against its own replay position.
func TestHistoryConcurrent(t *testing.T) {
	const appends = 20000
	h := NewHistory(64)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 0))
			now := at(time.Hour)
			for {
				select {
				case <-done:
					return
				default:
				}
				replay := LSN(10 + r.IntN(10*appends))
				if d, ok := h.StalenessBound(replay, now); ok {
					i := (time.Hour - d) / time.Millisecond // index of the sample used
					if LSN(10*i) > replay {
						t.Errorf("replay %v got bound from sample %d (LSN %d)", replay, i, 10*i)
						return
					}
				}
				if ok, why := h.Check(Position{Replay: replay}, Budget{MaxTime: time.Hour, MaxBytes: 1 << 40}, now); ok != (why == ReasonNone) {
					t.Errorf("Check = %v, %v", ok, why)
					return
				}
				s := h.Samples(nil)
				if len(s) > h.Capacity() {
					t.Errorf("%d samples kept, capacity %d", len(s), h.Capacity())
					return
				}
				for k := 1; k < len(s); k++ {
					if s[k].LSN <= s[k-1].LSN || !s[k].Sent.After(s[k-1].Sent) {
						t.Errorf("samples out of order: %v", s)
						return
					}
				}
			}
		})
	}
	for i := 1; i <= appends; i++ {
		if i%5000 == 0 {
			if err := h.Reset(Origin{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Append(Sample{Sent: at(time.Duration(i) * time.Millisecond), LSN: LSN(10 * i)}); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
}

// The routing hot path allocates nothing (not a timing assertion).
func TestHotPathAllocs(t *testing.T) {
	h := benchHistory(t)
	now := at(time.Hour)
	p := Position{SystemID: 42, Timeline: 3, Replay: 100 * 200}
	b := Budget{MaxTime: 2 * time.Second, MaxBytes: 16 << 20}
	w := Watermark{SystemID: 42, Timeline: 3, LSN: 100 * 150}
	var sink bool
	for name, f := range map[string]func(){
		"StalenessBound":    func() { _, sink = h.StalenessBound(p.Replay, now) },
		"Lag":               func() { sink = h.Lag(p, now).TimeKnown },
		"Check":             func() { sink, _ = h.Check(p, b, now) },
		"Budget.Allows":     func() { sink, _ = b.Allows(Lag{Time: time.Second, TimeKnown: true}) },
		"Watermark.Reached": func() { sink, _ = w.ReachedBy(p, 0) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per call", name, n)
		}
	}
	_ = sink
}

func benchHistory(tb testing.TB) *History {
	h := newHistory(tb, DefaultCapacity, Origin{SystemID: 42, Timeline: 3, Layout: defaultLayout})
	for i := 1; i <= 2*DefaultCapacity; i++ {
		if err := h.Append(Sample{Sent: at(time.Duration(i) * time.Second), LSN: LSN(100 * i)}); err != nil {
			tb.Fatal(err)
		}
	}
	return h
}

func BenchmarkStalenessBound(b *testing.B) {
	h := benchHistory(b)
	now := at(time.Hour)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.StalenessBound(LSN(100*DefaultCapacity+100*(i%DefaultCapacity)), now)
	}
}

func BenchmarkCheck(b *testing.B) {
	h := benchHistory(b)
	now := at(time.Hour)
	budget := Budget{MaxTime: 2 * time.Second, MaxBytes: 16 << 20}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Check(Position{SystemID: 42, Timeline: 3, Replay: LSN(100*DefaultCapacity + 100*(i%DefaultCapacity))}, budget, now)
	}
}

// Readers in parallel while one goroutine keeps appending.
func BenchmarkCheckParallelWithAppender(b *testing.B) {
	h := benchHistory(b)
	now := at(time.Hour)
	budget := Budget{MaxTime: 2 * time.Second}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 2*DefaultCapacity + 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			h.Append(Sample{Sent: at(time.Duration(i) * time.Second), LSN: LSN(100 * i)})
		}
	})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		p := Position{SystemID: 42, Timeline: 3, Replay: 100 * DefaultCapacity * 3}
		for pb.Next() {
			h.Check(p, budget, now)
		}
	})
	b.StopTimer()
	close(stop)
	wg.Wait()
}

func BenchmarkAppend(b *testing.B) {
	h := NewHistory(DefaultCapacity)
	b.ReportAllocs()
	for i := 1; b.Loop(); i++ {
		h.Append(Sample{Sent: at(time.Duration(i) * time.Millisecond), LSN: LSN(i)})
	}
}

// TestSpans: a history spans d once its oldest sample was sent more than d
// before now.
func TestSpans(t *testing.T) {
	var h History
	t0 := time.Unix(1000, 0)
	if h.Spans(time.Second, t0) {
		t.Fatal("an empty history spans a second")
	}
	if err := h.Append(Sample{Sent: t0, LSN: 100}); err != nil {
		t.Fatal(err)
	}
	if h.Spans(time.Second, t0.Add(time.Second)) {
		t.Error("a history whose oldest sample is a second old spans more than a second")
	}
	if !h.Spans(time.Second, t0.Add(time.Second+time.Millisecond)) {
		t.Error("a history whose oldest sample is 1.001 s old does not span a second")
	}
}
