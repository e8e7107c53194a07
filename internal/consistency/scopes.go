package consistency

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// This file is read-your-writes scoped by relation: a write's position is
// recorded against the relations it wrote, and a read needs only the
// positions of the relations it reads (which relations a statement reads
// and writes, by key, is the classifier's: sqlclass.Scope). A write whose
// relations are not known counts for every relation, and a read whose
// relations are not known needs every write.
//
// Scopes keeps three kinds of Mark: every (each write moves it: what a
// read of unknown relations needs, and what a Session's token carries),
// broad (the writes that count for every relation: every read needs it)
// and one per relation written, up to maxRelations: a write to a relation
// beyond them counts for every relation (broad). So a read of relations R
// needs broad and the marks of R; the Marks' rules (Settle,
// ResolveDeferred) apply to each, and the read plans with their
// combination (Read).

// maxRelations bounds the relations a Scopes keeps apart.
const maxRelations = 16

// maxReadMarks bounds the marks a read combines: broad and one per
// relation it names (sqlclass's maxScopeKeys).
const maxReadMarks = 5

// Scopes is the read-your-writes state of one owner (a Session, a
// Connector), by relation. Its zero value has no writes. It is safe for
// concurrent use.
type Scopes struct {
	every Mark
	broad Mark
	rels  atomic.Pointer[relTable] // at the first write to a named relation
	// foreign is set by IgnoreForeign; *nil func: no callback.
	foreign atomic.Pointer[func()]
	// combos are the latest combinations of states reads made (see
	// Read.combine), by the states combined.
	combos [maxCombos]atomic.Pointer[combo]
}

// maxCombos bounds the combinations a Scopes keeps: reads of different
// sets of written relations that share a slot replace each other.
const maxCombos = 8

// combo is the combination c of the states sts (nil past the read's
// marks: Read.Begin clears them): States are immutable, so a read that
// combines the same states (no write since to a relation it reads) uses c
// again, and allocates nothing.
type combo struct {
	sts [maxReadMarks]*State
	c   *State
}

// relTable is a Scopes' marks by relation: a slot is claimed (its key
// set, never changed) by the first write to its relation.
type relTable struct {
	slots [maxRelations]relSlot
}

type relSlot struct {
	key atomic.Uint32 // 0: free
	m   Mark
}

// Every is the mark every write moves: the state of a read of unknown
// relations, and what a Session's token carries.
func (s *Scopes) Every() *Mark { return &s.every }

// slot returns the mark of the relation key, claiming a free slot for it
// when claim is set; nil when it has none.
func (s *Scopes) slot(key uint32, claim bool) *Mark {
	t := s.rels.Load()
	if t == nil {
		if !claim {
			return nil
		}
		s.rels.CompareAndSwap(nil, new(relTable))
		t = s.rels.Load()
	}
	for i := range t.slots {
		sl := &t.slots[i]
		k := sl.key.Load()
		if k == key {
			return &sl.m
		}
		if k == 0 {
			if !claim {
				return nil
			}
			if sl.key.CompareAndSwap(0, key) || sl.key.Load() == key {
				return &sl.m
			}
		}
	}
	return nil
}

// Wrote records a committed write at w (zero: unknown) to the relations
// keys when named, else to every relation; see Mark.Wrote for now and
// sent.
func (s *Scopes) Wrote(named bool, keys []uint32, w lagmeter.Watermark, now, sent time.Time) {
	st := s.every.wrote(w, now, sent, nil)
	for _, m := range s.targets(named, keys) {
		if m != nil {
			m.wrote(w, now, sent, st)
		}
	}
}

// WroteDeferred records a committed write whose position is deferred (see
// Mark.WroteDeferred) to the relations keys when named, else to every
// relation.
func (s *Scopes) WroteDeferred(named bool, keys []uint32, on lagmeter.Watermark, now time.Time) {
	st := s.every.wroteDeferred(on, now, nil)
	for _, m := range s.targets(named, keys) {
		if m != nil {
			m.wroteDeferred(on, now, st)
		}
	}
}

// Saw records that a read (Causal) saw at most w: an upper bound of the
// WAL position its snapshot held, read after it (zero: no bound could be
// read; see Mark.Saw). The scope's next reads need w as they need a
// write's position. With named, the bound counts for the relations keys
// the read read (a Connector's reads, scoped by relation as its writes
// are); without, for every relation (a Session's reads: a read of one
// relation orders the user's next reads of every other). every, which a
// token carries, moves either way. A bound that changes nothing (no newer
// than the marks) publishes nothing.
func (s *Scopes) Saw(named bool, keys []uint32, w lagmeter.Watermark, now time.Time) {
	st := s.every.saw(w, now, nil)
	for _, m := range s.targets(named, keys) {
		if m != nil {
			m.saw(w, now, st)
		}
	}
}

// targets returns the marks a write to keys (named) moves beside every:
// the relations' own, or broad once for those without a slot, or for
// every relation.
func (s *Scopes) targets(named bool, keys []uint32) (ms [maxReadMarks]*Mark) {
	if !named || len(keys) >= maxReadMarks {
		ms[0] = &s.broad
		return ms
	}
	n := 0
	for _, k := range keys {
		m := s.slot(k, true)
		if m == nil {
			m = &s.broad // no slot left: every relation
		}
		dup := false
		for _, o := range ms[:n] {
			dup = dup || o == m
		}
		if !dup {
			ms[n] = m
			n++
		}
	}
	return ms
}

// Restore replaces the state with a token's, which origin vouches for
// (see Mark.Restore): it counts for every relation.
func (s *Scopes) Restore(wm lagmeter.Watermark, unknown bool, origin Origin, now time.Time) {
	s.rels.Store(nil)
	s.broad.Restore(wm, unknown, origin, now)
	s.every.Restore(wm, unknown, origin, now)
}

// DropForged forgets st, the state of every write restored from an
// unsigned token, whose position the primary has not reached (a forged
// token): s starts afresh, unless a write replaced the token first.
// dropped reports whether this call forgot it, so that a token counts
// once; it calls IgnoreForeign's callback (when set) then.
func (s *Scopes) DropForged(st *State) (dropped bool) {
	for {
		if s.every.p.CompareAndSwap(st, zeroState) {
			s.broad.dropIfToken(st.wm)
			if f := s.foreign.Load(); f != nil && *f != nil {
				(*f)()
			}
			return true
		}
		cur := s.every.Load()
		if cur.origin == Local || cur.wm != st.wm {
			return false
		}
		st = cur
	}
}

// dropIfToken forgets m's state while it is still a token's position wm.
func (m *Mark) dropIfToken(wm lagmeter.Watermark) {
	for {
		st := m.Load()
		if st.origin == Local || st.wm != wm || m.p.CompareAndSwap(st, zeroState) {
			return
		}
	}
}

// IgnoreForeign makes DropForeign forget a token of another cluster,
// calling dropped (when not nil) once for each token it forgets.
func (s *Scopes) IgnoreForeign(dropped func()) {
	s.foreign.Store(&dropped)
}

// DropForeign is called by a read that found the position of every (its
// state st) on another system than sys. ok is false when s does not
// ignore foreign tokens (IgnoreForeign): the read must fail. Otherwise s
// starts afresh, as a new Session would, when commit is true (not for
// Explain), unless another statement dropped the token or a write replaced
// it first; the read then plans with no position either way. dropped
// reports whether this call forgot it, so that a token counts once; it
// calls IgnoreForeign's callback (when set) then.
func (s *Scopes) DropForeign(st *State, sys uint64, commit bool) (ok, dropped bool) {
	f := s.foreign.Load()
	if f == nil {
		return false, false
	}
	if !commit {
		return true, false
	}
	if s.every.dropIfForeign(st, sys) {
		s.broad.dropIfForeign(s.broad.Load(), sys)
		s.rels.Store(nil)
		if *f != nil {
			(*f)()
		}
		return true, true
	}
	return true, false
}

// dropIfForeign replaces st, m's state, by no state while it names
// another system than sys, and reports whether it did.
func (m *Mark) dropIfForeign(st *State, sys uint64) bool {
	for {
		if st.wm.IsZero() || st.wm.SystemID == sys {
			return false
		}
		if m.p.CompareAndSwap(st, zeroState) {
			return true
		}
		st = m.Load()
	}
}

// Read is what a read of some relations needs of a Scopes: the marks it
// combines (every alone for unknown relations; else broad and the marks
// of the relations it names that were written) and their states. A Read
// is the read's own (on its stack); its zero value needs nothing.
type Read struct {
	s     *Scopes
	marks [maxReadMarks]*Mark
	sts   [maxReadMarks]*State
	n     int
	eff   Effect // the loss the last Settle or ResolveDeferred found (Effect)
}

// Begin makes r the read of the relations keys (named), or of unknown
// relations, in s.
func (r *Read) Begin(s *Scopes, named bool, keys []uint32) {
	// Only sts[:n] is ever set: clearing it leaves every entry nil (a
	// Read on its reader's stack, new, clears nothing).
	clear(r.sts[:r.n])
	r.s, r.n = s, 0
	if !named || len(keys) >= maxReadMarks {
		r.marks[0], r.n = &s.every, 1
		return
	}
	r.marks[0], r.n = &s.broad, 1
	for _, k := range keys {
		if m := s.slot(k, false); m != nil {
			r.marks[r.n] = m
			r.n++
		}
	}
}

// Every is the state of every write (what a token carries, and what a
// foreign token is told by).
func (r *Read) Every() *State { return r.s.every.Load() }

// Settle settles each mark of the read in view of p (see Mark.Settle),
// committing what it learns when commit is true, and returns the state
// the read plans with and whether the caller's last write was found lost.
// The loss to report is then r.Effect(): found by the mark of every write,
// which Settle also settles, so that one write is reported once,
// whichever relations the reads that find it read.
func (r *Read) Settle(p *Primary, now time.Time, commit bool) (_ *State, lost bool) {
	every := &r.s.every
	r.eff = Effect{}
	if r.n != 1 || r.marks[0] != every {
		if st := every.Load(); !st.blank() {
			_, _, r.eff = every.Settle(st, p, now, commit)
		}
	}
	for i := range r.n {
		st := r.marks[i].Load()
		if st.blank() {
			r.sts[i] = st // Settle's first case, without its call
			continue
		}
		var l bool
		var ei Effect
		r.sts[i], l, ei = r.marks[i].Settle(st, p, now, commit)
		lost = lost || l
		if r.marks[i] == every {
			r.eff = ei
		}
	}
	return r.combine(), lost
}

// ResolveDeferred completes each deferred state of the read with pos, read
// by a query that started after readAt (see Mark.ResolveDeferred), and
// returns the state the read plans with; ok is false when pos is on
// another history than one of them. The loss to report is then
// r.Effect(), found by the mark of every write only.
func (r *Read) ResolveDeferred(pos lagmeter.Watermark, readAt, now time.Time) (_ *State, ok bool) {
	ok = true
	r.eff = Effect{}
	for i := range r.n {
		if !r.sts[i].pending {
			continue
		}
		var oki bool
		var ei Effect
		r.sts[i], oki, ei = r.marks[i].ResolveDeferred(r.sts[i], pos, readAt, now)
		ok = ok && oki
		if r.marks[i] == &r.s.every {
			r.eff = ei
		}
	}
	return r.combine(), ok
}

// Effect is the loss the read's last Settle or ResolveDeferred found, to
// report (its Report NoLoss when none).
func (r *Read) Effect() *Effect { return &r.eff }

// combine returns the state of the read: the one state that records a
// write, or their combination (never a part of r, which lives on its
// reader's stack: a State of its own, made once for the same states and
// kept in the Scopes' combos): the later watermark, an unknown or
// deferred position when any is, the last write.
func (r *Read) combine() *State {
	var one *State
	k := 0
	for _, st := range r.sts[:r.n] {
		if st.blank() {
			continue
		}
		one = st
		k++
	}
	switch k {
	case 0:
		return zeroState
	case 1:
		return one
	}
	sts := r.sts[:r.n]
	slot := &r.s.combos[comboSlot(sts)]
	if m := slot.Load(); m != nil && m.sts == r.sts {
		return m.c
	}
	c := combine(sts)
	slot.Store(&combo{sts: r.sts, c: c})
	return c
}

// comboSlot is the slot of Scopes.combos that the combination of sts
// goes to.
func comboSlot(sts []*State) uintptr {
	var h uintptr
	for _, st := range sts {
		h = h*31 + uintptr(unsafe.Pointer(st))>>4
	}
	return h % maxCombos
}

// combine is the combination of sts, two or more of which record a
// write: a new State.
func combine(sts []*State) *State {
	c := new(State)
	var newest *State // the deferred state of the last write, its identity
	for _, st := range sts {
		if st.blank() {
			continue
		}
		c.wm = later(c.wm, st.wm)
		if st.unknown {
			c.unknown = true
			if st.unknownAt.After(c.unknownAt) {
				c.unknownAt = st.unknownAt
			}
		}
		if st.lastWrite.After(c.lastWrite) {
			c.lastWrite = st.lastWrite
		}
		c.fetched = c.fetched || st.fetched
		c.origin = max(c.origin, st.origin)
		if st.pending {
			switch {
			case !c.pending:
				c.pending, c.pendingAt, c.pendingOn, newest = true, st.pendingAt, st.pendingOn, st
			case !sameHistory(st.pendingOn, c.pendingOn):
				c.unknown, c.unknownAt = true, now0(c.unknownAt, st.pendingAt)
			case st.pendingAt.After(c.pendingAt):
				c.pendingAt, newest = st.pendingAt, st
			}
		}
	}
	c.last = newest
	// Seen when the position it needs is a read's bound, no write's.
	for _, st := range sts {
		if !st.blank() && st.wm == c.wm && !c.wm.IsZero() {
			if !st.seen {
				c.seen = false
				break
			}
			c.seen = true
		}
	}
	return c
}

// now0 is the later of two times.
func now0(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// blank reports whether s records no write.
func (s *State) blank() bool { return s.wm.IsZero() && !s.unknown && !s.pending }

// identity is what stands for s in the record of deferred positions'
// reads (DeferredUse): the state of the last deferred write among those a
// combination was made of, or s itself.
func (s *State) identity() *State {
	if s.last != nil {
		return s.last
	}
	return s
}

// Blank is the state of a read that needs no position (a foreign token
// forgotten, for Explain).
func (r *Read) Blank() *State { return zeroState }
