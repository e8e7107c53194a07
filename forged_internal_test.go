package pgrouted

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// TestVouch: a Session restored from a token that the newest position
// of the primary the Connector knows does not show written (past it on
// its history, on a later timeline, on another system), or restored while
// it knows none, asks the primary (the read index); still unwritten by
// the answer, it reads as a fresh Session and counts once as forged, in
// Stats.ForgedTokens and through the IgnoreForeign callback. A token of
// another system than the cluster's counts the same way without asking
// (and fails the read of a Session that does not ignore foreign tokens).
// A token the answer shows written, one on an older timeline, or one
// whose answer failed, stays as it is; a Session of this process's writes
// asks nothing.
func TestVouch(t *testing.T) {
	const known = 1 << 30 // benchConnector's primary position
	for _, tc := range []struct {
		name    string
		token   lagmeter.Watermark
		fetched lagmeter.Watermark // zero: the fetch fails
		asks    bool
		forged  bool
		unknown bool // the primary's probe has read no position yet
	}{
		{"at the probe", lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known}, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 100}, false, false, false},
		{"reached since", lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 50}, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 100}, true, false, false},
		{"past the primary", lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 500}, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 100}, true, true, false},
		{"fetch fails", lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 500}, lagmeter.Watermark{}, true, false, false},
		{"later timeline", lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 1}, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 100}, true, true, false},
		{"later timeline, fetch fails", lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 1}, lagmeter.Watermark{}, true, false, false},
		{"later timeline, the primary's since", lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 1}, lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 100}, true, false, false},
		{"later timeline, past the primary's since", lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 500}, lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 100}, true, true, false},
		{"another system", lagmeter.Watermark{SystemID: 8, Timeline: 1, LSN: 1}, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 100}, false, true, false},
		{"another system, no position known", lagmeter.Watermark{SystemID: 8, Timeline: 1, LSN: 1}, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 100}, false, true, true},
		{"no position known", lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 500}, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 100}, true, true, true},
		{"no position known, reached", lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 50}, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 100}, true, false, true},
		{"no position known, later timeline", lagmeter.Watermark{SystemID: 7, Timeline: 3, LSN: 1}, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 100}, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, v := benchConnector(&testing.B{}, dsn.SelectRoundRobin, 2)
			if tc.unknown {
				v.pst.End = 0
			}
			fetches := 0
			c.rw.index = consistency.NewReadIndex(func(context.Context) (lagmeter.Watermark, error) {
				fetches++
				if tc.fetched.IsZero() {
					return lagmeter.Watermark{}, errors.New("no primary")
				}
				return tc.fetched, nil
			}, time.Minute)
			t.Cleanup(c.rw.index.Close)
			s := NewSession()
			calls := 0
			s.IgnoreForeign(func() { calls++ })
			text, _ := tc.token.MarshalText()
			if err := s.UnmarshalText(text); err != nil {
				t.Fatal(err)
			}
			in := c.intentOf(&options{session: s})
			var rc readCtx
			if err := c.readCtx(&rc, context.Background(), &in, &sqlclass.AllRelations, false, v, true); err != nil {
				t.Fatal(err)
			}
			if (fetches > 0) != tc.asks {
				t.Errorf("%d fetches, want asked %v", fetches, tc.asks)
			}
			want := map[bool]uint64{true: 1}[tc.forged]
			forged := rc.st.Empty() && s.s.Every().Load().Empty()
			if forged != tc.forged || c.rw.forged.Load() != want || uint64(calls) != want {
				t.Errorf("state %v (Session %v), %d counted, %d callbacks; want forged %v", rc.st.Watermark(), s.s.Every().Load().Watermark(), c.rw.forged.Load(), calls, tc.forged)
			}
			if tc.forged {
				// Asked again (a retry on another replica): nothing more.
				if err := c.readCtx(&rc, context.Background(), &in, &sqlclass.AllRelations, false, v, true); err != nil || c.rw.forged.Load() != 1 || calls != 1 {
					t.Errorf("second plan: %v, %d counted, %d callbacks", err, c.rw.forged.Load(), calls)
				}
			}
		})
	}
	// The Session of this process's writes asks nothing, however far
	// ahead of the last probe (the write's position is the primary's).
	c, v := benchConnector(&testing.B{}, dsn.SelectRoundRobin, 2)
	c.rw.index = consistency.NewReadIndex(func(context.Context) (lagmeter.Watermark, error) {
		t.Error("a Session of this process's writes asked the primary")
		return lagmeter.Watermark{}, errors.New("no")
	}, time.Minute)
	t.Cleanup(c.rw.index.Close)
	s := NewSession()
	s.s.Wrote(false, nil, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: known + 1<<20}, time.Now(), time.Time{})
	in := c.intentOf(&options{session: s})
	var rc readCtx
	if err := c.readCtx(&rc, context.Background(), &in, &sqlclass.AllRelations, false, v, true); err != nil || rc.st.Empty() {
		t.Fatalf("a Session of this process's writes: %v, %+v", err, rc.st)
	}
}

// TestForeignTokenNotIgnored: a token of another system in a Session that
// does not ignore foreign tokens fails the read (ErrForeignSession) and
// counts nothing; Explain (a dry run) of a read of one that does plans it
// without the token, and forgets and counts nothing.
func TestForeignTokenNotIgnored(t *testing.T) {
	c, v := benchConnector(&testing.B{}, dsn.SelectRoundRobin, 2)
	token, _ := lagmeter.Watermark{SystemID: 8, Timeline: 1, LSN: 1}.MarshalText()
	s := NewSession()
	if err := s.UnmarshalText(token); err != nil {
		t.Fatal(err)
	}
	in := c.intentOf(&options{session: s})
	var rc readCtx
	if err := c.readCtx(&rc, context.Background(), &in, &sqlclass.AllRelations, false, v, true); !errors.Is(err, ErrForeignSession) || c.rw.forged.Load() != 0 {
		t.Fatalf("a foreign token not ignored: %v, %d counted; want ErrForeignSession, none", err, c.rw.forged.Load())
	}
	calls := 0
	s.IgnoreForeign(func() { calls++ })
	if err := c.readCtx(&rc, context.Background(), &in, &sqlclass.AllRelations, false, v, false); err != nil || !rc.st.Empty() || s.s.Every().Load().Empty() || c.rw.forged.Load() != 0 || calls != 0 {
		t.Fatalf("Explain with a foreign token: %v, plans %v, Session %v, %d counted, %d callbacks; want a blank plan, the token kept, nothing counted",
			err, rc.st.Watermark(), s.s.Every().Load().Watermark(), c.rw.forged.Load(), calls)
	}
}

// TestMissOfAPositionNobodyWrote: a wait that misses a position the
// primary is not known to have written stops nobody's waits on the
// replica; one that misses a written position does.
func TestMissOfAPositionNobodyWrote(t *testing.T) {
	known := lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 1000}
	for _, tc := range []struct {
		wm    lagmeter.Watermark
		noted bool
	}{
		{lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 1000}, true},
		{lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 1001}, false},
		{lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 10}, false},
		{lagmeter.Watermark{SystemID: 8, Timeline: 1, LSN: 10}, false},
	} {
		var h host
		h.noteMiss(3, tc.wm, known)
		if (h.missed.Load() != nil) != tc.noted {
			t.Errorf("a miss of %v with the primary known at %v: noted %v, want %v", tc.wm, known, h.missed.Load() != nil, tc.noted)
		}
	}
}

// TestWaitSlots: reads wait on a replica in at most half its pool (at
// least one connection); a wait that ends gives its slot back; Explain
// (a dry run) takes none; a slot whose read never waited frees itself.
func TestWaitSlots(t *testing.T) {
	c, v := benchConnector(&testing.B{}, dsn.SelectRoundRobin, 2) // pools of 4
	h := &v.hosts[1]
	in := consistency.Intent{Wait: 100 * time.Millisecond}
	pk := pick{host: h, check: true, wm: lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 1 << 31}}
	dry := in
	dry.DryRun = true
	for range 5 {
		if d := c.waitFor(&dry, pk); d != in.Wait {
			t.Fatalf("Explain's plan: wait %v, want %v", d, in.Wait)
		}
	}
	for i := range 2 {
		if d := c.waitFor(&in, pk); d != in.Wait {
			t.Fatalf("read %d: wait %v, want %v", i, d, in.Wait)
		}
	}
	if d := c.waitFor(&in, pk); d != 0 {
		t.Fatalf("a third read waiting on a pool of 4: wait %v, want none", d)
	}
	c.waited(h.host, h.probe.Conn, pk.wm, in.Wait, time.Now(), nil)
	if d := c.waitFor(&in, pk); d != in.Wait {
		t.Fatalf("after a wait ended: wait %v, want %v", d, in.Wait)
	}
	if !h.waits.take(time.Now().Add(in.Wait+waitSlack+time.Millisecond), in.Wait, h.maxConns) {
		t.Fatal("slots of reads that never waited did not free themselves")
	}
	var one waitSlots
	one.take(time.Now(), time.Second, 1)
	if n := len(one.until); n != 1 {
		t.Fatalf("a pool of 1: %d slots, want 1", n)
	}
}

// TestLostWriteReportedOnce: a lost write is counted and logged once per
// position (system, timeline, LSN), however often it is found again (a
// signed token replayed after a lossy failover finds it in each new
// Session); another position is reported on its own; the memory of
// positions is bounded (lostSetSize): one evicted by as many later ones
// is reported again.
func TestLostWriteReportedOnce(t *testing.T) {
	var logs bytes.Buffer
	c := &Connector{}
	c.cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c.log = printableLogger(c.cfg.Logger) // as NewConnector sets it
	lost := func(lsn lagmeter.LSN) *consistency.Effect {
		return &consistency.Effect{Report: consistency.Lost, From: lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: lsn}, SwitchPoint: 100, Timeline: 2}
	}
	check := func(when string, want int) {
		t.Helper()
		lines := strings.Count(logs.String(), "was lost with the old primary")
		if n := c.counters.lostWrites.Load(); n != uint64(want) || lines != want {
			t.Fatalf("%s: %d lost writes counted, %d logged; want %d", when, n, lines, want)
		}
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { c.reportLoss(lost(1000)) })
	}
	wg.Wait()
	check("one position found 8 times at once", 1)
	c.reportLoss(lost(2000))
	c.reportLoss(&consistency.Effect{Report: consistency.Lost, From: lagmeter.Watermark{SystemID: 7, Timeline: 3, LSN: 1000}, SwitchPoint: 100, Timeline: 4})
	c.reportLoss(&consistency.Effect{Report: consistency.Lost, From: lagmeter.Watermark{SystemID: 8, Timeline: 1, LSN: 1000}, SwitchPoint: 100, Timeline: 2})
	check("another LSN, timeline, system", 4)
	for i := range lostSetSize {
		c.reportLoss(lost(lagmeter.LSN(10_000 + i)))
	}
	check("as many other positions as are kept", 4+lostSetSize)
	c.reportLoss(lost(1000))
	check("the first position again, evicted", 5+lostSetSize)
	c.reportLoss(lost(10_000 + lostSetSize - 1))
	check("the last position again, kept", 5+lostSetSize)
}
