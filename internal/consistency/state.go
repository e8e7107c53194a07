package consistency

import (
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// State is the read-your-writes state of a Mark at one moment: the
// position of the last writes, or that it is unknown, or that it is
// deferred. A State never changes once published; its fields are read
// through its methods.
type State struct {
	wm        lagmeter.Watermark
	unknown   bool      // the last write's position could not be read
	unknownAt time.Time // since when; a primary probe sent after it resolves it
	lastWrite time.Time // for pgrouted_pin_after_write and the catch-up record

	// pending: writes since wm left their position to be read when a read
	// needs it, the last one acknowledged before pendingAt (Now) on the
	// history pendingOn (SystemID and Timeline; no LSN).
	pending   bool
	pendingAt time.Time
	pendingOn lagmeter.Watermark
	// fetched: wm is a deferred position read for a read
	// (ResolveDeferred), with no write since: the reads that rely on it
	// count for the position's read (DeferredUse).
	fetched bool
	// origin: where wm came from (Restore), until a write through this
	// process replaces it.
	origin Origin
	// seen: wm is a bound of what a read saw (Saw), newer than the last
	// write's position: the last write's age says nothing of how soon a
	// replica holds it.
	seen bool
	// last: s combines the states of several marks (Read); last is the
	// one of their last deferred write (see identity).
	last *State
}

// Origin is where a State's position came from: what vouches for it.
type Origin uint8

// The origins of a position.
const (
	// Local: a write through this process (or no write at all).
	Local Origin = iota
	// Signed: a token whose signature verified (Verify): a process that
	// holds the key issued it after a write.
	Signed
	// Unsigned: a token nothing vouches for: its holder could have
	// written any position in it. Such a position is trusted only as far
	// as the primary has shown it (Ahead), and a failover never reports
	// it lost (Settle).
	Unsigned
)

// zeroState is the State of a Mark without writes.
var zeroState = &State{}

// Watermark is the position a replica must have replayed (zero: none).
func (s *State) Watermark() lagmeter.Watermark { return s.wm }

// Unknown reports whether the last write's position could not be read:
// no replica is known to hold it.
func (s *State) Unknown() bool { return s.unknown }

// LastWrite is when the last write was recorded (zero: none).
func (s *State) LastWrite() time.Time { return s.lastWrite }

// Pending reports whether writes left their position to be read when a
// read needs it (ResolveDeferred).
func (s *State) Pending() bool { return s.pending }

// Fetched reports whether the watermark is a deferred position read for a
// read, with no write since.
func (s *State) Fetched() bool { return s.fetched }

// Origin is where s's position came from.
func (s *State) Origin() Origin { return s.origin }

// Seen reports whether the position is a bound of what a read saw (Saw)
// rather than the last write's: a replica's record of how soon after a
// write it holds it (CatchUp) does not apply to it.
func (s *State) Seen() bool { return s.seen }

// Empty reports whether s records no write at all (a new Session's).
func (s *State) Empty() bool { return s.wm.IsZero() && !s.unknown }

// WithIndex returns the state a global read plans with once the primary's
// position pos was read after the read began (err: it could not be):
// pos is at or past every write acknowledged before, an unknown one
// included, and a deferred one on its history. It is the read's own; the
// Mark does not change.
func (s *State) WithIndex(pos lagmeter.Watermark, err error, now time.Time) *State {
	next := *s
	if err != nil {
		next.unknown, next.unknownAt = true, now
		return &next
	}
	next.unknown, next.wm = false, later(next.wm, pos)
	if next.pending && sameHistory(pos, next.pendingOn) {
		next.pending = false
	}
	return &next
}

// AtLeast returns s needing pos too (Explain of a global read: the
// position the primary's last probe read, which the read needs at least).
func (s *State) AtLeast(pos lagmeter.Watermark) *State {
	next := *s
	next.wm = later(next.wm, pos)
	return &next
}

// Mark is the position of the last writes of a Session or a Connector,
// published as an immutable State. Its zero value has no writes. It is
// safe for concurrent use.
type Mark struct {
	p atomic.Pointer[State]
}

// Load returns the current state.
func (m *Mark) Load() *State {
	if st := m.p.Load(); st != nil {
		return st
	}
	return zeroState
}

// Wrote records a committed write at w (zero: its position is unknown),
// read by a query sent at sent (Now; zero when not known): a deferred
// position on w's history acknowledged before sent is at or before w.
func (m *Mark) Wrote(w lagmeter.Watermark, now, sent time.Time) { m.wrote(w, now, sent, nil) }

// wrote is Wrote, publishing like (the state the same write made of
// another mark) when the state it makes is equal to it; it returns the
// state it published.
func (m *Mark) wrote(w lagmeter.Watermark, now, sent time.Time, like *State) *State {
	for {
		cur := m.p.Load()
		next := State{lastWrite: now}
		if cur != nil {
			next = *cur
			next.lastWrite, next.fetched = now, false
		}
		if w.IsZero() {
			next.unknown, next.unknownAt = true, now
		} else {
			next.wm = later(next.wm, w)
			if next.origin != Local && sameHistory(next.wm, w) {
				// A token's position on w's history that an honest
				// client held came from a write committed before this
				// one: w is at or past it.
				next.wm = w
			}
			if next.wm == w {
				next.origin, next.seen = Local, false
			}
			if next.pending && !sent.IsZero() && sent.After(next.pendingAt) && sameHistory(w, next.pendingOn) {
				next.pending = false
			}
		}
		if st := m.publish(cur, &next, like); st != nil {
			return st
		}
	}
}

// Saw records that a read saw at most w, an upper bound of the WAL
// position its snapshot held (Causal: monotonic reads and
// writes-follow-reads): the mark's position becomes the later of its own
// and w, so that the next read needs a replica that has replayed w, as
// after a write at w. It records no write: the last write's time, a
// deferred position and an unknown one stay as they were. w zero (the
// bound could not be read: the read's answer was cut short) makes the
// position unknown as of now, which a probe of the primary sent after it
// settles (Settle): the primary's position then is at or past anything a
// replica had replayed before. A bound that a replica replayed was written
// by the primary: where it is the mark's position, the position is this
// process's own (Origin Local), not a token's.
func (m *Mark) Saw(w lagmeter.Watermark, now time.Time) { m.saw(w, now, nil) }

// saw is Saw, publishing like as wrote does; it returns the state it
// published, or the current one when w changes nothing.
func (m *Mark) saw(w lagmeter.Watermark, now time.Time, like *State) *State {
	for {
		cur := m.p.Load()
		var next State
		if cur != nil {
			next = *cur
		}
		if w.IsZero() {
			next.unknown, next.unknownAt = true, now
		} else {
			if wm := later(next.wm, w); wm != next.wm {
				next.wm, next.seen = wm, true
			}
			if next.wm == w {
				next.origin = Local
			}
		}
		if cur != nil && next == *cur {
			return cur
		}
		if cur == nil && next == *zeroState {
			return zeroState
		}
		if st := m.publish(cur, &next, like); st != nil {
			return st
		}
	}
}

// WroteDeferred records a committed write acknowledged before now (Now) on
// the history on (SystemID and Timeline; zero when not known: its position
// is then unknown), whose position is deferred. An older deferred position
// on another history becomes unknown: the mark keeps one history's.
func (m *Mark) WroteDeferred(on lagmeter.Watermark, now time.Time) { m.wroteDeferred(on, now, nil) }

// wroteDeferred is WroteDeferred, publishing like as wrote does.
func (m *Mark) wroteDeferred(on lagmeter.Watermark, now time.Time, like *State) *State {
	for {
		cur := m.p.Load()
		var next State
		if cur != nil {
			next = *cur
		}
		next.lastWrite, next.fetched = now, false
		switch {
		case on.SystemID == 0 || on.Timeline == 0:
			next.unknown, next.unknownAt = true, now
		case next.pending && !sameHistory(on, next.pendingOn):
			next.unknown, next.unknownAt = true, now
			fallthrough
		default:
			next.pending, next.pendingAt, next.pendingOn = true, now, on
		}
		if st := m.publish(cur, &next, like); st != nil {
			return st
		}
	}
}

// publish replaces cur, m's state, with next: like when it is equal to
// next, else a copy of next. One write moves several marks of a Scopes,
// which most often hold equal states before it (a service writing one
// relation), and so after it: they share one State (States are
// immutable), and the write allocates one. It returns the state published,
// or nil when m no longer held cur.
func (m *Mark) publish(cur, next, like *State) *State {
	st := like
	if st == nil || *st != *next {
		st = new(State)
		*st = *next
	}
	if m.p.CompareAndSwap(cur, st) {
		return st
	}
	return nil
}

// Restore replaces the state with a token's: its position wm (zero: no
// write), or an unknown position (unknown, as of now); origin says what
// vouches for it (Signed or Unsigned; Local for a token this process
// trusts as its own writes).
func (m *Mark) Restore(wm lagmeter.Watermark, unknown bool, origin Origin, now time.Time) {
	st := &State{wm: wm, origin: origin}
	if unknown {
		st.unknown, st.unknownAt = true, now
	}
	m.p.Store(st)
}

// Primary is what the last probe of the current primary showed, as the
// transitions need it.
type Primary struct {
	SystemID uint64
	Timeline uint32
	// End is the end of the WAL the primary had written at the probe (0:
	// not known); a write acknowledged before the probe was sent is at or
	// before it.
	End lagmeter.LSN
	// Probed: the probe read the primary's insert position; ProbedAt is
	// when that probe was sent.
	Probed   bool
	ProbedAt time.Time
	// Switches is the primary's timeline history; SwitchFloor a lower
	// bound of its own switch point, as a promoted standby saw it.
	Switches    []lagmeter.TimelineSwitch
	SwitchFloor lagmeter.TimelineSwitch
}

// Position is the end of the WAL the primary had written at its last
// probe, as a watermark; false when it is not known.
func (p *Primary) Position() (lagmeter.Watermark, bool) {
	if p == nil || p.End == 0 || p.SystemID == 0 || p.Timeline == 0 {
		return lagmeter.Watermark{}, false
	}
	return lagmeter.Watermark{SystemID: p.SystemID, Timeline: p.Timeline, LSN: p.End}, true
}

// Loss is what a transition found of the last writes across a failover.
type Loss uint8

// The losses an Effect reports.
const (
	// NoLoss: nothing to report.
	NoLoss Loss = iota
	// Lost: the write is not in the new primary's history (the switch
	// point is known exactly, and the write is past it).
	Lost
	// MayBeLost: whether the write survived cannot be told; reads go to
	// the primary until a probe of the new primary settles it.
	MayBeLost
)

// Effect is what a transition asks its caller to report (count, log): it
// is set only for the caller whose transition was published, so that a
// loss is reported once, not by every read that sees it.
type Effect struct {
	Report Loss
	// From is the write's position (its LSN 0 when it was deferred and
	// never read); SwitchPoint where the new primary's history left its
	// timeline (Lost); Timeline the new primary's.
	From        lagmeter.Watermark
	SwitchPoint lagmeter.LSN
	Timeline    uint32
}

// Settle returns the state a read plans with in view of p, the current
// primary (nil: none known), from st, m's state, and whether the caller's
// last write was found lost in a failover (RouteEvent.WriteLost). It
// publishes what it learns when commit is true (not for Explain); a read
// made while another write changed the mark uses what it learned without
// publishing it (that write is not before the read). The rules:
//
//   - a position written on an older timeline than p's (a failover since):
//     at or before the point where p's history left that timeline (known
//     exactly from the timeline history file, or as a lower bound from the
//     replay position p had reached as a standby) the write survived, and
//     moves to p's timeline; past the exact switch point it was lost with
//     the old primary (Lost), and the read requires what survived; else
//     nobody can tell (MayBeLost): the position becomes unknown;
//   - an unknown position is resolved by a probe of p sent after it became
//     unknown: that probe read a position at or after the write;
//   - a deferred position on p's history is settled by such a probe too;
//     on another history (a failover since) it becomes unknown
//     (MayBeLost: whether it survived needs its position, which nobody
//     read).
//
// A position restored from an unsigned token (Origin Unsigned) moves the
// same way, but is never reported lost (lost false, no Effect): its holder
// could have written any position in it.
func (m *Mark) Settle(st *State, p *Primary, now time.Time, commit bool) (_ *State, lost bool, e Effect) {
	if p == nil || st.blank() {
		return st, false, e
	}
	if st.origin == Unsigned {
		defer func() { lost, e = false, Effect{} }()
	}
	if w := st.wm; !w.IsZero() && p.SystemID == w.SystemID && p.Timeline > w.Timeline {
		st, lost, e = m.crossTimeline(st, p, now, commit)
	}
	if st.unknown && p.Probed && p.SystemID != 0 && p.Timeline != 0 && p.ProbedAt.After(st.unknownAt) {
		w := lagmeter.Watermark{SystemID: p.SystemID, Timeline: p.Timeline, LSN: p.End}
		next := *st
		next.unknown, next.wm = false, later(st.wm, w)
		if !commit {
			return &next, lost, e
		}
		if m.p.CompareAndSwap(st, &next) {
			st = &next
		} else {
			st = m.Load()
		}
	}
	st, e2 := m.settleDeferred(st, p, now, commit)
	if e2.Report != NoLoss {
		e = e2
	}
	return st, lost, e
}

// crossTimeline is Settle's rule for a position written on an older
// timeline than p's.
func (m *Mark) crossTimeline(st *State, p *Primary, now time.Time, commit bool) (_ *State, lost bool, e Effect) {
	w := st.wm
	sp, exact := lagmeter.SwitchPoint(p.Switches, w.Timeline)
	if !exact && p.SwitchFloor.Timeline == w.Timeline {
		sp = p.SwitchFloor.LSN
	}
	next := *st
	switch {
	case sp != 0 && w.LSN <= sp:
		next.wm = lagmeter.Watermark{SystemID: w.SystemID, Timeline: p.Timeline, LSN: w.LSN}
	case exact:
		next.wm = lagmeter.Watermark{SystemID: w.SystemID, Timeline: p.Timeline, LSN: sp}
		lost = true
	default:
		next.wm, next.unknown, next.unknownAt = lagmeter.Watermark{}, true, now
	}
	if !commit {
		return &next, lost, e
	}
	if !m.p.CompareAndSwap(st, &next) {
		return m.Load(), lost, e
	}
	switch {
	case lost:
		e = Effect{Report: Lost, From: w, SwitchPoint: sp, Timeline: p.Timeline}
	case next.unknown:
		e = Effect{Report: MayBeLost, From: w, Timeline: p.Timeline}
	}
	return &next, lost, e
}

// settleDeferred is Settle's rule for a deferred position.
func (m *Mark) settleDeferred(st *State, p *Primary, now time.Time, commit bool) (*State, Effect) {
	if !st.pending || p.SystemID == 0 || p.Timeline == 0 {
		return st, Effect{}
	}
	next := *st
	other := p.SystemID != st.pendingOn.SystemID || p.Timeline != st.pendingOn.Timeline
	if other {
		next.pending, next.unknown, next.unknownAt = false, true, now
	} else if w, ok := p.Position(); ok && p.Probed && p.ProbedAt.After(st.pendingAt) {
		next.pending, next.wm = false, later(st.wm, w)
	} else {
		return st, Effect{}
	}
	var e Effect
	if commit && m.p.CompareAndSwap(st, &next) && other {
		e = Effect{Report: MayBeLost, From: st.pendingOn, Timeline: p.Timeline}
	}
	return &next, e
}

// ResolveDeferred completes st, m's state with a deferred position, with
// that position pos, read by a query that started after readAt (Now), for
// a read that began before readAt. ok is false when pos is on another
// history than the writes' (a failover since): the position is then
// unknown (MayBeLost). The result is the read's either way; it is
// published (unless another statement changed the mark first) only when
// pos covers every write st records: the last was acknowledged before
// readAt. (A read planned again after a replica missed, with the position
// its first plan read, may find writes made since: pos serves the read,
// which began before them, not the mark.)
func (m *Mark) ResolveDeferred(st *State, pos lagmeter.Watermark, readAt, now time.Time) (_ *State, ok bool, e Effect) {
	next := *st
	if !sameHistory(pos, st.pendingOn) {
		next.pending, next.unknown, next.unknownAt = false, true, now
		if m.p.CompareAndSwap(st, &next) {
			e = Effect{Report: MayBeLost, From: st.pendingOn, Timeline: pos.Timeline}
		}
		return &next, false, e
	}
	next.pending, next.wm, next.fetched = false, later(st.wm, pos), true
	if next.wm == pos {
		next.seen = false // the writes' position, past what reads saw
	}
	if !st.pendingAt.After(readAt) {
		m.p.CompareAndSwap(st, &next)
	}
	return &next, true, e
}

// later returns the watermark that implies the other: the same history's
// larger position, or the newer history's.
func later(a, b lagmeter.Watermark) lagmeter.Watermark {
	switch {
	case a.IsZero():
		return b
	case b.IsZero():
		return a
	case a.SystemID != b.SystemID:
		return b // the cluster was replaced: the newest write tells
	case a.Timeline != b.Timeline:
		if b.Timeline > a.Timeline {
			return b
		}
		return a
	case b.LSN > a.LSN:
		return b
	}
	return a
}

// sameHistory reports whether the watermarks a and b are on one history:
// the same system and timeline.
func sameHistory(a, b lagmeter.Watermark) bool {
	return a.SystemID == b.SystemID && a.Timeline == b.Timeline
}

// Later returns the watermark that implies the others: the same history's
// largest position, or the newest history's.
func Later(ws ...lagmeter.Watermark) lagmeter.Watermark {
	var l lagmeter.Watermark
	for _, w := range ws {
		l = later(l, w)
	}
	return l
}

// Ahead reports whether w is past p, a position the primary was seen at,
// on p's history: the primary had not written w when p was read. A
// position on another history (another system, an older or a newer
// timeline) is not ahead: p says nothing of it.
func Ahead(w, p lagmeter.Watermark) bool {
	return !w.IsZero() && !p.IsZero() && sameHistory(w, p) && w.LSN > p.LSN
}

// Unwritten reports whether the primary, seen at p (a position it had
// written), had not written w when p was read: w is past p on p's
// history, or on a later timeline of p's system, or on another system. A
// position on an older timeline is not: p's history may hold it (Settle
// tells). This is the one rule by which a token's position is found
// forged (the Connector's vouch).
func Unwritten(w, p lagmeter.Watermark) bool {
	switch {
	case w.IsZero() || p.IsZero():
		return false
	case w.SystemID != p.SystemID:
		return true
	case w.Timeline != p.Timeline:
		return w.Timeline > p.Timeline
	}
	return w.LSN > p.LSN
}

// Reached reports whether the primary is known to have written w: w is on
// the history of p, a position the primary was seen at, at or before it.
func Reached(w, p lagmeter.Watermark) bool {
	return !w.IsZero() && !p.IsZero() && sameHistory(w, p) && w.LSN <= p.LSN
}
