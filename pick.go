package pgrouted

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/topology"
)

// A picker chooses the replica of a read among two or more eligible ones
// (see Connector.pickReplica, which decides which are eligible). cand holds
// host indexes into the snapshot s and the Connector's hosts; the picker
// may reorder or filter it in place. advance is false for Explain: the
// choice must then leave no trace (a round-robin position does not move).
//
// There is one small picker per pgrouted_select policy, and Config.Select
// is one more, in front of the policy's.
type picker interface {
	pick(ctx context.Context, s *topology.Snapshot, cand []int, advance bool) int
}

// newPicker returns the picker of policy over hosts, keeping the
// candidates within window of the fastest (dsn.LatencyWindowOff: all);
// with a Config.Select hook, the hook's picker in front of it.
func newPicker(policy dsn.SelectPolicy, window time.Duration, hosts *hostTable, hook func(context.Context, []Candidate) string, logger *slog.Logger) picker {
	var p picker
	switch policy {
	case dsn.SelectNearest:
		p = nearest{}
	case dsn.SelectRandom:
		p = random{window}
	case dsn.SelectLeastInflight:
		p = leastInflight{window, hosts}
	case dsn.SelectWeighted:
		p = &weighted{window: window, hosts: hosts}
	default:
		p = &roundRobin{window: window}
	}
	if hook != nil {
		p = &selectHook{fn: hook, hosts: hosts, next: p, logger: logger}
	}
	return p
}

// choose asks c's picker for one of cand. The built-in pickers are called
// on their concrete types, so that cand stays on the caller's stack (a call
// through the interface would move it to the heap); the Config.Select
// hook's picker gets a copy.
func (c *Connector) choose(ctx context.Context, s *topology.Snapshot, cand []int, advance bool) int {
	if len(cand) == 1 {
		return cand[0]
	}
	return pickWith(c.picker, ctx, s, cand, advance)
}

func pickWith(p picker, ctx context.Context, s *topology.Snapshot, cand []int, advance bool) int {
	switch p := p.(type) {
	case *roundRobin:
		return p.pick(ctx, s, cand, advance)
	case *weighted:
		return p.pick(ctx, s, cand, advance)
	case leastInflight:
		return p.pick(ctx, s, cand, advance)
	case nearest:
		return p.pick(ctx, s, cand, advance)
	case random:
		return p.pick(ctx, s, cand, advance)
	}
	return p.pick(ctx, s, append([]int(nil), cand...), advance)
}

// roundRobin takes the candidates in turn (pgrouted_select=round-robin).
type roundRobin struct {
	window time.Duration
	n      atomic.Uint64
}

func (p *roundRobin) pick(_ context.Context, s *topology.Snapshot, cand []int, advance bool) int {
	cand = inWindow(s, cand, p.window)
	return cand[turn(&p.n, advance)%uint64(len(cand))]
}

// weighted gives each candidate a share of the reads proportional to its
// pgrouted_weights entry, interleaved (pgrouted_select=weighted).
type weighted struct {
	window time.Duration
	hosts  *hostTable
	n      atomic.Uint64
}

func (p *weighted) pick(_ context.Context, s *topology.Snapshot, cand []int, advance bool) int {
	cand = inWindow(s, cand, p.window)
	if len(cand) == 1 {
		return cand[0]
	}
	hosts := p.hosts.all()
	total := 0
	for _, i := range cand {
		total += hosts[i].Weight
	}
	// Step through the positions 0..total-1 by a stride coprime with total,
	// so that a host of weight w gets w reads in every total, spread out
	// rather than in a burst.
	x := int((turn(&p.n, advance) * weightStride(total)) % uint64(total))
	for _, i := range cand {
		if x < hosts[i].Weight {
			return i
		}
		x -= hosts[i].Weight
	}
	return cand[len(cand)-1]
}

// leastInflight takes the less busy of two random candidates (power of two
// random choices on the in-flight count, pgrouted_select=least-inflight).
type leastInflight struct {
	window time.Duration
	hosts  *hostTable
}

func (p leastInflight) pick(_ context.Context, s *topology.Snapshot, cand []int, _ bool) int {
	cand = inWindow(s, cand, p.window)
	if len(cand) == 1 {
		return cand[0]
	}
	a := rand.IntN(len(cand))
	b := rand.IntN(len(cand) - 1)
	if b >= a {
		b++
	}
	if hosts := p.hosts.all(); hosts[cand[b]].inflight() < hosts[cand[a]].inflight() {
		return cand[b]
	}
	return cand[a]
}

// nearest takes the candidate with the smallest probe round trip
// (pgrouted_select=nearest); the latency window does not apply.
type nearest struct{}

func (nearest) pick(_ context.Context, s *topology.Snapshot, cand []int, _ bool) int {
	best := cand[0]
	for _, i := range cand[1:] {
		if r := s.Hosts[i].RTT; r > 0 && (s.Hosts[best].RTT == 0 || r < s.Hosts[best].RTT) {
			best = i
		}
	}
	return best
}

// random takes a candidate at random (pgrouted_select=random).
type random struct {
	window time.Duration
}

func (p random) pick(_ context.Context, s *topology.Snapshot, cand []int, _ bool) int {
	cand = inWindow(s, cand, p.window)
	return cand[rand.IntN(len(cand))]
}

// selectHook asks Config.Select, and leaves the choice to next (the
// policy's picker) when the hook returns no candidate's name, when it
// panics, and for Explain.
type selectHook struct {
	fn     func(context.Context, []Candidate) string
	hosts  *hostTable
	next   picker
	logger *slog.Logger
}

func (p *selectHook) pick(ctx context.Context, s *topology.Snapshot, cand []int, advance bool) int {
	if advance {
		if i, ok := p.ask(ctx, s, cand); ok {
			return i
		}
	}
	return pickWith(p.next, ctx, s, cand, advance)
}

func (p *selectHook) ask(ctx context.Context, s *topology.Snapshot, cand []int) (host int, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			host, ok = -1, false
			if p.logger != nil {
				p.logger.Error("pgrouted: Config.Select panicked", "panic", fmt.Sprint(r))
			}
		}
	}()
	cs := make([]Candidate, len(cand))
	var primaryInsert lagmeter.LSN
	if s.Primary >= 0 {
		primaryInsert = s.Hosts[s.Primary].InsertLSN
	}
	for k, i := range cand {
		h, st := p.hosts.at(i), &s.Hosts[i]
		lag, known := lagmeter.ByteLag(primaryInsert, h.replay(st))
		cs[k] = Candidate{Name: st.Name, Weight: h.Weight, Inflight: h.inflight(), RTT: st.RTT, ByteLag: lag, ByteLagKnown: known}
	}
	name := p.fn(ctx, cs)
	for k, i := range cand {
		if cs[k].Name == name {
			return i, true
		}
	}
	return -1, false
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
func inWindow(s *topology.Snapshot, cand []int, window time.Duration) []int {
	if window < 0 {
		return cand
	}
	var fastest time.Duration
	for _, i := range cand {
		if r := s.Hosts[i].RTT; r > 0 && (fastest == 0 || r < fastest) {
			fastest = r
		}
	}
	if fastest == 0 {
		return cand
	}
	kept := cand[:0]
	for _, i := range cand {
		if r := s.Hosts[i].RTT; r == 0 || inLatencyWindow(r, fastest, window) {
			kept = append(kept, i)
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
