package pgrouted

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
)

// A picker chooses the replica of a read among two or more eligible ones
// (see Connector.pickReplica, which decides which are eligible), each a host
// with its probe state in one view; the picker may reorder or filter cand
// in place. advance is false for Explain: the
// choice must then leave no trace (a round-robin position does not move).
//
// There is one small picker per pgrouted_select policy, and Config.Select
// is one more, in front of the policy's.
type picker interface {
	pick(ctx context.Context, cand []*hostView, advance bool) *hostView
}

// newPicker returns the picker of policy, keeping the
// candidates within window of the fastest (dsn.LatencyWindowOff: all);
// with a Config.Select hook, the hook's picker in front of it.
func newPicker(policy dsn.SelectPolicy, window time.Duration, hook func(context.Context, []Candidate) string, logger *slog.Logger) picker {
	var p picker
	switch policy {
	case dsn.SelectNearest:
		p = nearest{}
	case dsn.SelectRandom:
		p = random{window}
	case dsn.SelectLeastInflight:
		p = leastInflight{window}
	case dsn.SelectWeighted:
		p = &weighted{window: window}
	default:
		p = &roundRobin{window: window}
	}
	if hook != nil {
		p = &selectHook{fn: hook, next: p, logger: logger}
	}
	return p
}

// choose asks c's picker for one of cand. The built-in pickers are called
// on their concrete types, so that cand stays on the caller's stack (a call
// through the interface would move it to the heap); the Config.Select
// hook's picker gets a copy.
func (c *Connector) choose(ctx context.Context, cand []*hostView, advance bool) *hostView {
	if len(cand) == 1 {
		return cand[0]
	}
	return pickWith(c.picker, ctx, cand, advance)
}

func pickWith(p picker, ctx context.Context, cand []*hostView, advance bool) *hostView {
	switch p := p.(type) {
	case *roundRobin:
		return p.pick(ctx, cand, advance)
	case *weighted:
		return p.pick(ctx, cand, advance)
	case leastInflight:
		return p.pick(ctx, cand, advance)
	case nearest:
		return p.pick(ctx, cand, advance)
	case random:
		return p.pick(ctx, cand, advance)
	}
	return p.pick(ctx, append([]*hostView(nil), cand...), advance)
}

// roundRobin takes the candidates in turn (pgrouted_select=round-robin).
type roundRobin struct {
	window time.Duration
	n      atomic.Uint64
}

func (p *roundRobin) pick(_ context.Context, cand []*hostView, advance bool) *hostView {
	cand = inWindow(cand, p.window)
	return cand[turn(&p.n, advance)%uint64(len(cand))]
}

// weighted gives each candidate a share of the reads proportional to its
// pgrouted_weights entry (pgrouted_select=weighted). It is deterministic,
// not random: a shared counter steps through the positions 0..total-1 (total
// the candidates' summed weights) by a fixed stride coprime with total, and
// the candidate whose weight band holds the position serves; so a host of
// weight w gets exactly w reads in every total turns, interleaved.
type weighted struct {
	window time.Duration
	n      atomic.Uint64
}

func (p *weighted) pick(_ context.Context, cand []*hostView, advance bool) *hostView {
	cand = inWindow(cand, p.window)
	if len(cand) == 1 {
		return cand[0]
	}
	total := 0
	for _, h := range cand {
		total += h.Weight
	}
	x := int((turn(&p.n, advance) * weightStride(total)) % uint64(total))
	for _, h := range cand {
		if x < h.Weight {
			return h
		}
		x -= h.Weight
	}
	return cand[len(cand)-1]
}

// leastInflight draws two distinct candidates at random and takes the one
// with fewer reads in flight through this Connector, the first drawn on a
// tie (the power of two random choices, pgrouted_select=least-inflight). It
// does not scan every candidate for the least busy one.
type leastInflight struct {
	window time.Duration
}

func (p leastInflight) pick(_ context.Context, cand []*hostView, _ bool) *hostView {
	cand = inWindow(cand, p.window)
	if len(cand) == 1 {
		return cand[0]
	}
	a := rand.IntN(len(cand))
	b := rand.IntN(len(cand) - 1)
	if b >= a {
		b++
	}
	if cand[b].inflight() < cand[a].inflight() {
		return cand[b]
	}
	return cand[a]
}

// nearest takes the candidate with the smallest probe round trip, the
// first such on a tie, and one whose round trip is unknown only when none
// is known (pgrouted_select=nearest); the latency window does not apply.
type nearest struct{}

func (nearest) pick(_ context.Context, cand []*hostView, _ bool) *hostView {
	best := cand[0]
	for _, h := range cand[1:] {
		if r := h.probe.RTT; r > 0 && (best.probe.RTT == 0 || r < best.probe.RTT) {
			best = h
		}
	}
	return best
}

// random takes a candidate uniformly at random (pgrouted_select=random).
type random struct {
	window time.Duration
}

func (p random) pick(_ context.Context, cand []*hostView, _ bool) *hostView {
	cand = inWindow(cand, p.window)
	return cand[rand.IntN(len(cand))]
}

// selectHook asks Config.Select, and leaves the choice to next (the
// policy's picker) when the hook returns no candidate's name, when it
// panics, and for Explain.
type selectHook struct {
	fn     func(context.Context, []Candidate) string
	next   picker
	logger *slog.Logger
}

func (p *selectHook) pick(ctx context.Context, cand []*hostView, advance bool) *hostView {
	if advance {
		if h := p.ask(ctx, cand); h != nil {
			return h
		}
	}
	return pickWith(p.next, ctx, cand, advance)
}

// ask returns the candidate the hook named, nil for none.
func (p *selectHook) ask(ctx context.Context, cand []*hostView) (chosen *hostView) {
	defer func() {
		if r := recover(); r != nil {
			chosen = nil
			if p.logger != nil {
				p.logger.Error("pgrouted: Config.Select panicked", "panic", fmt.Sprint(r))
			}
		}
	}()
	cs := make([]Candidate, len(cand))
	for k, h := range cand {
		lag, known := h.byteLag()
		cs[k] = Candidate{Name: h.probe.Name, Weight: h.Weight, Inflight: h.inflight(), RTT: h.probe.RTT, ByteLag: lag, ByteLagKnown: known}
	}
	name := p.fn(ctx, cs)
	for k, h := range cand {
		if cs[k].Name == name {
			return h
		}
	}
	return nil
}

// turn returns the next position of a shared counter, or the current one
// when advance is false.
func turn(n *atomic.Uint64, advance bool) uint64 {
	if advance {
		return n.Add(1) - 1
	}
	return n.Load()
}

// inWindow keeps the candidates inside the latency window
// (pgrouted_latency_window, see inLatencyWindow), a candidate whose round
// trip is not known yet included, and every candidate when no round trip
// is known or the window is off. It filters in place.
func inWindow(cand []*hostView, window time.Duration) []*hostView {
	if window < 0 {
		return cand
	}
	var fastest time.Duration
	for _, h := range cand {
		if r := h.probe.RTT; r > 0 && (fastest == 0 || r < fastest) {
			fastest = r
		}
	}
	if fastest == 0 {
		return cand
	}
	kept := cand[:0]
	for _, h := range cand {
		if r := h.probe.RTT; r == 0 || inLatencyWindow(r, fastest, window) {
			kept = append(kept, h)
		}
	}
	return kept
}

// inLatencyWindow reports whether a replica whose probe round trip is rtt
// is inside the latency window of the fastest candidate's, fastest: rtt ≤
// fastest + max(window, fastest). The window is relative as well as
// absolute, so that it never takes out a replica less than twice as slow
// as the fastest. It keeps reads off a far replica (another region, tens
// of milliseconds more) while the replicas of one site, whose round trips
// differ by noise, stay in; and on a loaded machine, where every probe
// waits for a CPU and the fastest is slow too, the window widens with it.
// It cannot tell a replica slowed for a moment from a far one: a single
// replica's spike above fastest + window takes it out until its round
// trip's moving average comes back (a few probes).
func inLatencyWindow(rtt, fastest, window time.Duration) bool {
	return rtt <= fastest+max(window, fastest)
}

// weightStride returns a stride coprime with total, near total·0.618, for
// the weighted interleave.
func weightStride(total int) uint64 {
	if total <= 2 {
		return 1
	}
	for k := total * 618 / 1000; k > 1; k-- {
		if gcd(k, total) == 1 {
			return uint64(k)
		}
	}
	return 1
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
