package circuit

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is an injected clock: it only moves when a test says so.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var errProbe = errors.New("probe failed")

// step is one report and what the breaker shows after it.
type step struct {
	op           string // probe-fail, probe-ok, data-fail, data-ok
	state        State
	failures     int
	failedProbes int
	backoff      time.Duration
}

func apply(t *testing.T, b *Breaker, op string) {
	t.Helper()
	switch op {
	case "probe-fail":
		b.ReportProbe(errProbe)
	case "probe-ok":
		b.ReportProbe(nil)
	case "data-fail":
		b.ReportFailure()
	case "data-ok":
		b.ReportSuccess()
	default:
		t.Fatalf("unknown op %q", op)
	}
}

func TestTransitions(t *testing.T) {
	const s = time.Second
	def := Config{Interval: s, MaxBackoff: 30 * s}
	tests := []struct {
		name   string
		cfg    Config
		steps  []step
		opened uint64
	}{
		{
			name: "two probe failures open",
			cfg:  def,
			steps: []step{
				{"probe-fail", Closed, 1, 0, s},
				{"probe-fail", Open, 2, 0, s},
			},
			opened: 1,
		},
		{
			name: "two data failures open",
			cfg:  def,
			steps: []step{
				{"data-fail", Closed, 1, 0, s},
				{"data-fail", Open, 2, 0, s},
			},
			opened: 1,
		},
		{
			name: "defaults: two failures, 1s interval",
			cfg:  Config{},
			steps: []step{
				{"data-fail", Closed, 1, 0, DefaultInterval},
				{"probe-fail", Open, 2, 0, DefaultInterval},
			},
			opened: 1,
		},
		{
			name: "three failures configured",
			cfg:  Config{Failures: 3, Interval: s},
			steps: []step{
				{"data-fail", Closed, 1, 0, s},
				{"data-fail", Closed, 2, 0, s},
				{"data-fail", Open, 3, 0, s},
			},
			opened: 1,
		},
		{
			name: "one failure configured",
			cfg:  Config{Failures: 1, Interval: s},
			steps: []step{
				{"data-fail", Open, 1, 0, s},
				{"probe-ok", Closed, 0, 0, s},
				{"probe-fail", Open, 1, 0, s},
			},
			opened: 2,
		},
		{
			name: "mixed: probe then data failure open",
			cfg:  def,
			steps: []step{
				{"probe-fail", Closed, 1, 0, s},
				{"data-fail", Open, 2, 0, s},
			},
			opened: 1,
		},
		{
			name: "mixed: data then probe failure open",
			cfg:  def,
			steps: []step{
				{"data-fail", Closed, 1, 0, s},
				{"probe-fail", Open, 2, 0, s},
			},
			opened: 1,
		},
		{
			name: "probe success in between resets",
			cfg:  def,
			steps: []step{
				{"probe-fail", Closed, 1, 0, s},
				{"probe-ok", Closed, 0, 0, s},
				{"probe-fail", Closed, 1, 0, s},
				{"probe-ok", Closed, 0, 0, s},
				{"data-fail", Closed, 1, 0, s},
			},
		},
		{
			name: "data success in between resets",
			cfg:  def,
			steps: []step{
				{"data-fail", Closed, 1, 0, s},
				{"data-ok", Closed, 0, 0, s},
				{"probe-fail", Closed, 1, 0, s},
				{"data-ok", Closed, 0, 0, s},
				{"data-fail", Closed, 1, 0, s},
			},
		},
		{
			name: "successes on a healthy breaker change nothing",
			cfg:  def,
			steps: []step{
				{"data-ok", Closed, 0, 0, s},
				{"probe-ok", Closed, 0, 0, s},
				{"data-ok", Closed, 0, 0, s},
			},
		},
		{
			name: "one probe success closes",
			cfg:  def,
			steps: []step{
				{"data-fail", Closed, 1, 0, s},
				{"data-fail", Open, 2, 0, s},
				{"probe-fail", Open, 3, 1, 2 * s},
				{"probe-ok", Closed, 0, 0, s},
				{"data-fail", Closed, 1, 0, s},
			},
			opened: 1,
		},
		{
			name: "a data success while open does not close",
			cfg:  def,
			steps: []step{
				{"data-fail", Closed, 1, 0, s},
				{"data-fail", Open, 2, 0, s},
				{"data-ok", Open, 2, 0, s},
				{"data-ok", Open, 2, 0, s},
				{"probe-ok", Closed, 0, 0, s},
			},
			opened: 1,
		},
		{
			name: "backoff doubles per failed probe and caps",
			cfg:  Config{Interval: s, MaxBackoff: 10 * s},
			steps: []step{
				{"probe-fail", Closed, 1, 0, s},
				{"probe-fail", Open, 2, 0, s},
				{"probe-fail", Open, 3, 1, 2 * s},
				{"probe-fail", Open, 4, 2, 4 * s},
				{"probe-fail", Open, 5, 3, 8 * s},
				{"probe-fail", Open, 6, 4, 10 * s},
				{"probe-fail", Open, 7, 5, 10 * s},
				{"probe-ok", Closed, 0, 0, s},
				// Opening again starts the backoff over.
				{"probe-fail", Closed, 1, 0, s},
				{"probe-fail", Open, 2, 0, s},
				{"probe-fail", Open, 3, 1, 2 * s},
			},
			opened: 2,
		},
		{
			name: "default backoff sequence up to 30s",
			cfg:  Config{},
			steps: []step{
				{"data-fail", Closed, 1, 0, s},
				{"data-fail", Open, 2, 0, s},
				{"probe-fail", Open, 3, 1, 2 * s},
				{"probe-fail", Open, 4, 2, 4 * s},
				{"probe-fail", Open, 5, 3, 8 * s},
				{"probe-fail", Open, 6, 4, 16 * s},
				{"probe-fail", Open, 7, 5, 30 * s},
				{"probe-fail", Open, 8, 6, 30 * s},
			},
			opened: 1,
		},
		{
			name: "data failures while open change nothing",
			cfg:  def,
			steps: []step{
				{"data-fail", Closed, 1, 0, s},
				{"data-fail", Open, 2, 0, s},
				{"probe-fail", Open, 3, 1, 2 * s},
				{"data-fail", Open, 3, 1, 2 * s},
				{"data-fail", Open, 3, 1, 2 * s},
				{"data-fail", Open, 3, 1, 2 * s},
				{"probe-fail", Open, 4, 2, 4 * s},
				{"data-fail", Open, 4, 2, 4 * s},
				{"probe-ok", Closed, 0, 0, s},
			},
			opened: 1,
		},
		{
			name: "max backoff shorter than the interval caps the open wait",
			cfg:  Config{Interval: s, MaxBackoff: 300 * time.Millisecond},
			steps: []step{
				{"probe-fail", Closed, 1, 0, s},
				{"probe-fail", Open, 2, 0, 300 * time.Millisecond},
				{"probe-fail", Open, 3, 1, 300 * time.Millisecond},
				{"probe-ok", Closed, 0, 0, s},
			},
			opened: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			tt.cfg.Now = clk.Now
			b, err := New("db2:5432", tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range tt.steps {
				clk.Advance(time.Second)
				apply(t, b, st.op)
				got := b.Snapshot()
				if got.State != st.state || b.State() != st.state || b.Allow() != (st.state == Closed) {
					t.Fatalf("step %d (%s): state %v, State() %v, Allow() %v; want %v",
						i, st.op, got.State, b.State(), b.Allow(), st.state)
				}
				if got.Failures != st.failures {
					t.Errorf("step %d (%s): failures %d, want %d", i, st.op, got.Failures, st.failures)
				}
				if got.FailedProbes != st.failedProbes {
					t.Errorf("step %d (%s): failed probes %d, want %d", i, st.op, got.FailedProbes, st.failedProbes)
				}
				if got.Backoff != st.backoff || b.ProbeBackoff() != st.backoff {
					t.Errorf("step %d (%s): backoff %v, ProbeBackoff() %v, want %v",
						i, st.op, got.Backoff, b.ProbeBackoff(), st.backoff)
				}
			}
			if got := b.Snapshot().Opened; got != tt.opened {
				t.Errorf("opened %d times, want %d", got, tt.opened)
			}
		})
	}
}

func TestCounters(t *testing.T) {
	clk := newFakeClock()
	b, err := New("db2", Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Snapshot(); !got.LastChange.IsZero() || got.Opened != 0 {
		t.Fatalf("new breaker: %+v", got)
	}
	b.ReportProbe(errProbe)
	b.ReportSuccess()
	b.ReportFailure()
	clk.Advance(time.Minute)
	b.ReportFailure() // opens
	openedAt := clk.Now()
	clk.Advance(time.Second)
	b.ReportFailure() // ignored
	b.ReportSuccess() // ignored
	b.ReportProbe(errProbe)
	got := b.Snapshot()
	want := Snapshot{
		Name:             "db2",
		State:            Open,
		Failures:         3,
		FailedProbes:     1,
		Opened:           1,
		LastChange:       openedAt,
		Backoff:          2 * time.Second,
		ProbeFailures:    2,
		DataFailures:     3,
		IgnoredWhileOpen: 2,
	}
	if got != want {
		t.Fatalf("snapshot\n got %+v\nwant %+v", got, want)
	}
	clk.Advance(time.Second)
	b.ReportProbe(nil)
	if got := b.Snapshot(); got.LastChange != clk.Now() || got.State != Closed || got.Opened != 1 {
		t.Fatalf("after closing: %+v", got)
	}
}

func TestOnChange(t *testing.T) {
	clk := newFakeClock()
	var got []Change
	b, err := New("db3", Config{Now: clk.Now, OnChange: func(c Change) { got = append(got, c) }})
	if err != nil {
		t.Fatal(err)
	}
	t0 := clk.Now()
	b.ReportFailure()
	b.ReportProbe(errProbe) // opens (probe)
	b.ReportFailure()       // ignored: no event
	b.ReportProbe(errProbe) // backoff: no event
	clk.Advance(5 * time.Second)
	t1 := clk.Now()
	b.ReportProbe(nil) // closes
	b.ReportProbe(nil) // no event
	b.ReportSuccess()
	clk.Advance(time.Second)
	t2 := clk.Now()
	b.ReportFailure()
	b.ReportFailure() // opens (data)

	want := []Change{
		{Name: "db3", From: Closed, To: Open, At: t0, Source: Probe, Failures: 2, Opened: 1},
		{Name: "db3", From: Open, To: Closed, At: t1, Source: Probe, Failures: 3, Opened: 1},
		{Name: "db3", From: Closed, To: Open, At: t2, Source: Data, Failures: 2, Opened: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d changes %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("change %d\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// OnChange runs with no lock held: it may read the breaker, and even
// report to it, without deadlock; a change it causes is delivered after
// the one it is handling.
func TestOnChangeReentrant(t *testing.T) {
	var got []string
	var b *Breaker
	b, err := New("db2", Config{Failures: 1, OnChange: func(c Change) {
		s := b.Snapshot()
		got = append(got, c.To.String()+"/"+s.State.String())
		if c.To == Open {
			b.ReportProbe(nil) // closes, from inside the callback
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	b.ReportFailure()
	want := "open/open closed/closed"
	if s := strings.Join(got, " "); s != want {
		t.Fatalf("got %q, want %q", s, want)
	}
}

// A panicking OnChange does not stop later changes from being delivered.
func TestOnChangePanic(t *testing.T) {
	var calls int
	b, err := New("db2", Config{Failures: 1, OnChange: func(c Change) {
		calls++
		if calls == 1 {
			panic("boom")
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not propagate")
			}
		}()
		b.ReportFailure()
	}()
	b.ReportProbe(nil)
	if calls != 2 {
		t.Fatalf("OnChange called %d times, want 2", calls)
	}
}

func TestJitter(t *testing.T) {
	const s = time.Second
	// A fixed sequence of draws: deterministic under test.
	draws := []float64{0.5, 0, 0.999, -1, 2, math.NaN()}
	next := 0
	rnd := func() float64 { r := draws[next%len(draws)]; next++; return r }
	b, err := New("db2", Config{Interval: s, MaxBackoff: 10 * s, Jitter: 0.5, Rand: rnd})
	if err != nil {
		t.Fatal(err)
	}
	b.ReportFailure()
	if got := b.ProbeBackoff(); got != s {
		t.Fatalf("closed: backoff %v, want %v without jitter", got, s)
	}
	if next != 0 {
		t.Fatalf("closed: Rand called %d times", next)
	}
	want := []time.Duration{
		750 * time.Millisecond,      // open: 1s·(1−0.5·0.5)
		2 * s,                       // 2s·(1−0)
		4*s - 1998*time.Millisecond, // 4s·(1−0.5·0.999)
		8 * s,                       // out of range draw: no jitter
		10 * s,                      // capped, out of range draw
		10 * s,                      // NaN draw
		7500 * time.Millisecond,     // 10s·(1−0.5·0.5), drawn again
	}
	b.ReportFailure() // opens
	for i, w := range want {
		if i > 0 {
			b.ReportProbe(errProbe)
		}
		if got := b.ProbeBackoff(); got != w {
			t.Errorf("wait %d: %v, want %v", i, got, w)
		}
	}
	b.ReportProbe(nil)
	if got := b.ProbeBackoff(); got != s {
		t.Fatalf("closed again: backoff %v, want %v", got, s)
	}
}

func TestJitterDefaultRand(t *testing.T) {
	b, err := New("db2", Config{Failures: 1, Interval: time.Second, MaxBackoff: 8 * time.Second, Jitter: 1})
	if err != nil {
		t.Fatal(err)
	}
	b.ReportFailure()
	for range 10 {
		b.ReportProbe(errProbe)
		if got := b.ProbeBackoff(); got <= 0 || got > 8*time.Second {
			t.Fatalf("backoff %v out of (0, 8s]", got)
		}
	}
}

func TestNew(t *testing.T) {
	bad := []struct {
		cfg  Config
		want string
	}{
		{Config{Failures: -1}, "Failures (-1)"},
		{Config{Interval: -time.Second}, "Interval (-1s)"},
		{Config{MaxBackoff: -time.Second}, "MaxBackoff (-1s)"},
		{Config{Jitter: -0.1}, "Jitter (-0.1)"},
		{Config{Jitter: 1.5}, "Jitter (1.5)"},
		{Config{Jitter: math.NaN()}, "Jitter (NaN)"},
	}
	for _, tt := range bad {
		b, err := New("x", tt.cfg)
		if err == nil || b != nil {
			t.Errorf("New(%+v) = %v, %v; want an error", tt.cfg, b, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v): %q does not name %q", tt.cfg, err, tt.want)
		}
	}
	b, err := New("db1", Config{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "db1" || b.State() != Closed || !b.Allow() || b.ProbeBackoff() != DefaultInterval {
		t.Fatalf("new breaker: name %q state %v backoff %v", b.Name(), b.State(), b.ProbeBackoff())
	}
	if b.cfg.Failures != DefaultFailures || b.cfg.MaxBackoff != DefaultMaxBackoff {
		t.Fatalf("defaults not applied: %+v", b.cfg)
	}
}

// A MaxBackoff near the largest Duration does not overflow while doubling.
func TestBackoffNoOverflow(t *testing.T) {
	limit := time.Duration(math.MaxInt64)
	b, err := New("db2", Config{Failures: 1, Interval: time.Second, MaxBackoff: limit})
	if err != nil {
		t.Fatal(err)
	}
	b.ReportFailure()
	prev := b.ProbeBackoff()
	for range 100 {
		b.ReportProbe(errProbe)
		got := b.ProbeBackoff()
		if got < prev || got > limit {
			t.Fatalf("backoff went from %v to %v", prev, got)
		}
		prev = got
	}
	if prev != limit {
		t.Fatalf("backoff %v, want the cap %v", prev, limit)
	}
}

func TestText(t *testing.T) {
	for _, s := range []State{Closed, Open} {
		text, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back State
		if err := back.UnmarshalText(text); err != nil || back != s {
			t.Errorf("state %v: round trip %q gives %v, %v", s, text, back, err)
		}
	}
	for _, s := range []Source{Probe, Data} {
		text, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Source
		if err := back.UnmarshalText(text); err != nil || back != s {
			t.Errorf("source %v: round trip %q gives %v, %v", s, text, back, err)
		}
	}
	if _, err := State(7).MarshalText(); err == nil {
		t.Error("State(7) marshalled")
	}
	if _, err := Source(0).MarshalText(); err == nil {
		t.Error("Source(0) marshalled")
	}
	var st State
	if err := st.UnmarshalText([]byte("half-open")); err == nil {
		t.Error("half-open unmarshalled")
	}
	var src Source
	if err := src.UnmarshalText([]byte("")); err == nil {
		t.Error("empty source unmarshalled")
	}
	if State(7).String() != "State(7)" || Source(9).String() != "Source(9)" {
		t.Error("String of an invalid value")
	}
}

func TestJSON(t *testing.T) {
	clk := newFakeClock()
	b, err := New("db2:5432", Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(b.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"db2:5432","state":"closed","failures":0,"failedProbes":0,"opened":0,` +
		`"backoff":1000000000,"probeFailures":0,"dataFailures":0,"ignoredWhileOpen":0}`
	if string(out) != want {
		t.Fatalf("closed snapshot\n got %s\nwant %s", out, want)
	}

	var change Change
	b.cfg.OnChange = func(c Change) { change = c }
	b.ReportFailure()
	b.ReportFailure()
	out, err = json.Marshal(b.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	want = `{"name":"db2:5432","state":"open","failures":2,"failedProbes":0,"opened":1,` +
		`"lastChange":"2025-01-02T03:04:05Z","backoff":1000000000,"probeFailures":0,"dataFailures":2,"ignoredWhileOpen":0}`
	if string(out) != want {
		t.Fatalf("open snapshot\n got %s\nwant %s", out, want)
	}
	var back Snapshot
	if err := json.Unmarshal(out, &back); err != nil || back != b.Snapshot() {
		t.Fatalf("snapshot round trip: %+v, %v", back, err)
	}

	out, err = json.Marshal(change)
	if err != nil {
		t.Fatal(err)
	}
	want = `{"name":"db2:5432","from":"closed","to":"open","at":"2025-01-02T03:04:05Z","source":"data","failures":2,"opened":1}`
	if string(out) != want {
		t.Fatalf("change\n got %s\nwant %s", out, want)
	}
}

// The hot-path methods allocate nothing. (Their speed is measured by the
// benchmarks, never asserted.)
func TestHotPathAllocs(t *testing.T) {
	b, err := New("db2", Config{})
	if err != nil {
		t.Fatal(err)
	}
	var sink bool
	for name, f := range map[string]func(){
		"Allow":         func() { sink = b.Allow() },
		"State":         func() { sink = b.State() == Open },
		"ProbeBackoff":  func() { sink = b.ProbeBackoff() == 0 },
		"ReportSuccess": b.ReportSuccess,
		"ReportFailure+ReportSuccess": func() {
			b.ReportFailure()
			b.ReportSuccess()
		},
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocs/op", name, n)
		}
	}
	_ = sink
}

// Many goroutines route (Allow, State, ProbeBackoff) while others report
// from both sources. Run with -race. The changes delivered alternate and
// match the counters.
func TestConcurrent(t *testing.T) {
	var (
		mu      sync.Mutex
		changes []Change
	)
	b, err := New("db2", Config{Jitter: 0.3, OnChange: func(c Change) {
		mu.Lock()
		changes = append(changes, c)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if b.Allow() {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
				if s := b.State(); s != Closed && s != Open {
					t.Errorf("state %v", s)
					return
				}
				if d := b.ProbeBackoff(); d <= 0 || d > DefaultMaxBackoff {
					t.Errorf("backoff %v", d)
					return
				}
			}
		})
	}
	var reporters sync.WaitGroup
	for g := range 4 {
		reporters.Go(func() {
			for i := range 5000 {
				switch (i + g) % 5 {
				case 0, 1:
					b.ReportFailure()
				case 2:
					b.ReportSuccess()
				case 3:
					b.ReportProbe(errProbe)
				case 4:
					if i%3 == 0 {
						b.ReportProbe(nil)
					} else {
						b.ReportProbe(errProbe)
					}
				}
			}
		})
	}
	reporters.Go(func() {
		for range 2000 {
			_ = b.Snapshot()
		}
	})
	reporters.Wait()
	close(stop)
	wg.Wait()

	s := b.Snapshot()
	mu.Lock()
	defer mu.Unlock()
	var opens uint64
	want := Open
	for i, c := range changes {
		if c.To != want || c.From == c.To {
			t.Fatalf("change %d: %v -> %v, want to %v", i, c.From, c.To, want)
		}
		if c.To == Open {
			opens++
			if c.Opened != opens {
				t.Fatalf("change %d: opened %d, want %d", i, c.Opened, opens)
			}
			want = Closed
		} else {
			want = Open
		}
	}
	if opens != s.Opened || opens == 0 {
		t.Fatalf("%d open changes delivered, snapshot says %d", opens, s.Opened)
	}
	if (s.State == Open) != (len(changes)%2 == 1) {
		t.Fatalf("final state %v after %d changes", s.State, len(changes))
	}
	if s.ProbeFailures == 0 || s.DataFailures != 4*2000 {
		t.Fatalf("counters: %+v", s)
	}
	t.Logf("%d changes; Allow true %d, false %d; %+v", len(changes), allowed.Load(), denied.Load(), s)
}
