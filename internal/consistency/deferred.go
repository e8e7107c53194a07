package consistency

import (
	"sync/atomic"
	"time"
)

// This file is the rule of the deferred position of a write: a write that moves only
// the Connector's read-your-writes mark (no Session in its context) does
// not read the primary's WAL position after its commit. It runs as pgx
// runs it, one statement, and costs the primary what it costs through pgx;
// the mark records that a write committed, when, and on which history
// (system identifier and timeline), with its position to be read.
//
// The position is read when a read needs it, and only then: a read that
// would check a replica for the writes before it. pg_current_wal_insert_lsn()
// read at any moment after a commit was acknowledged is at or past it (a
// position serves everyone after it), so one read of the primary's
// position, made after the read began, serves it and every write
// acknowledged before: the read index of global consistency
// (readindex.go), whose fetches concurrent reads share. A read the
// primary serves anyway (no replica eligible, one catching up: catchup.go)
// reads nothing. A probe of the primary sent after the write read a
// position at or past it too, and settles the mark without a fetch.
//
// A read right after its write, whose replicas' checks at that write age
// mostly missed, goes to the primary (catchup.go) without reading the
// position: alone, the position's read costs the primary a statement as
// the read itself would, and the check after it would likely miss. The
// checks sent after a position's read are recorded at the write's age
// when they were sent, as any check is, so the record keeps telling how
// soon each replica holds a write; reads later after the write go to the
// replicas. So do reads made while a position read is under way
// (ReadIndex.Waiting), whatever the record says: they share it, at no cost
// to the primary, which in a process whose goroutines write and read all
// the time (every read "right after" someone's write) keeps the replicas
// serving.
//
// A position's read pays when it serves more than the read that makes it:
// alone, it costs the primary a statement, as the read itself would, and
// the replica's check and read come on top (bench/RESULTS.md: a read-back
// right after its write, by a process that writes and reads back one row
// at a time). It serves more when concurrent reads share it, and when
// reads after it rely on the position it read (they check replicas
// against it until the next write). So each Connector keeps a record of
// how many reads its positions' reads served lately (deferredUse): when
// they served fewer than deferredPays each, a read that would start one
// goes to the primary instead (reason position-deferred). Those reads count in the
// record as the position's read would have counted them: the first read
// after a write as a position read started, the others before the next
// write as reads it served. So the record follows the process's reads
// without reading positions to find out: a process that starts reading
// more after each write makes them pay again, and reads them. Any read
// does when the record is older than catchUpRecheck; a read that can join
// a position read under way does, as it costs the primary nothing. Reads
// that may wait for the position on a replica (pgrouted_replica_wait) or
// may not fall back to the primary always read it.
//
// The position read is on the write's history or the mark cannot use it:
// when the primary's system or timeline is no longer the write's (a
// failover since), the write's position is unknown, as a position whose
// read failed is (Settle: reads go to the primary until a probe of
// the new primary settles it). So a write whose position nobody read
// before a failover is reported as possibly lost, not as lost: telling
// needs its position, which a Session's writes read at once (its token
// carries it across processes).

const (
	// deferredPays: a position's read pays when it serves this many reads
	// (see the file's comment): it then spares the primary at least one
	// read beyond its own statement.
	deferredPays = 2
	// deferredWindow: the record keeps about the last deferredWindow
	// position reads (its counts are halved when they reach it).
	deferredWindow = 16
	// deferredLearn: the first reads of positions are made whatever the
	// record says, until it holds this many.
	deferredLearn = 4
)

// DeferredUse is a Connector's record of what the reads of its deferred
// positions served lately, or would have served: how many were started
// and how many reads they served (see the file's comment). It is safe for
// concurrent use.
type DeferredUse struct {
	n    atomic.Uint64 // position reads started in the high 32 bits, reads served in the low 32
	last atomic.Int64  // when the last one started (ns since base)
	// skipped is the mark state of the last read sent to the primary by
	// the record (a write's: the next write makes another).
	skipped atomic.Pointer[State]
}

// add counts started position reads and served reads, halving both
// counts when the first reaches deferredWindow. The reads are counted up
// to deferredPays per position read of a full window: beyond, they would
// tell nothing more, and a burst of reads relying on one position (a
// process that wrote once, then reads) would outweigh the position reads
// after it for long.
func (u *DeferredUse) add(started, served uint64) {
	for {
		cur := u.n.Load()
		s, r := cur>>32+started, min(cur&(1<<32-1)+served, deferredPays*deferredWindow)
		if s >= deferredWindow {
			s, r = s/2, r/2
		}
		// A full count stays as it is without a write: the reads that
		// rely on one position are counted on every read's path.
		if next := s<<32 | r; next == cur || u.n.CompareAndSwap(cur, next) {
			return
		}
	}
}

// Served counts a read that a position's read served, at now: one it
// started or joined (started: it opened the read's round), or one that
// relied on the position it read (a replica read planned while the
// caller's mark is that position, State.Fetched).
func (u *DeferredUse) Served(started bool, now time.Time) {
	if !started {
		u.add(0, 1)
		return
	}
	u.last.Store(nanos(now))
	u.add(1, 1)
}

// Read counts a read at now that read its caller's deferred position (a
// position read it started or joined), st its mark's state. A position
// read of a state that a read sent to the primary already counted as
// started (skip: the first read after the write) counts as a read served:
// a write's position is read once, whichever read makes it, so that the
// reads after a write count as many position reads as there were writes.
// Otherwise a process that sends the first reads after each write to the
// primary and then reads the position (the write aged past the replicas'
// catch-up) would count two position reads per write, and the reads it
// sends to the primary would never make them pay.
func (u *DeferredUse) Read(st *State, started bool, now time.Time) {
	if started && u.skipped.Load() == st.identity() {
		u.last.Store(nanos(now))
		u.add(0, 1)
		return
	}
	u.Served(started, now)
}

// Skip counts a read at now that the record sent to the primary without
// reading its caller's deferred position (position-deferred), st its mark's
// state, as the position's read would have counted it: the first such
// read of a write's state as a read started (and served), the next ones
// of the same state as reads it served.
func (u *DeferredUse) Skip(st *State, now time.Time) {
	// Loaded first: the reads after the first of a write's state write
	// nothing shared here (add writes nothing once its count is full).
	st = st.identity()
	if u.skipped.Load() == st || u.skipped.Swap(st) == st {
		u.add(0, 1)
		return
	}
	u.Served(true, now)
}

// Worth reports whether a read at now should start a read of its
// caller's deferred position: the record's position reads served (or
// would have served) deferredPays reads each, or it is too short or too
// old to tell.
func (u *DeferredUse) Worth(now time.Time) bool {
	cur := u.n.Load()
	s, r := cur>>32, cur&(1<<32-1)
	return s < deferredLearn || r >= deferredPays*s ||
		since(u.last.Load(), now) > catchUpRecheck
}
