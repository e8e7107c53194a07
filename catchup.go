package pgrouted

import (
	"errors"
	"math/bits"
	"sync/atomic"
	"time"
)

// This file is how soon after a write a replica holds it: for each
// replica, the share of its position checks that did not find the caller's
// last write replayed, by the age of that write when the check was sent.
//
// A read whose replicas must first check their replay position (none is
// proven to hold the caller's writes) goes straight to the primary when,
// at its write's age, more of those checks fail than find the write: a
// failed check costs the replica a round trip, and the read then costs the
// primary what it would have cost anyway, one round trip later. A read
// right after its write is the usual case (bench/RESULTS.md: the read-back
// right after a write). One read in catchUpExplore of those still checks,
// and any read does once its replica's record at that age is older than
// catchUpRecheck, so that a replica that replays faster again is noticed
// within about catchUpRecheck times the checks it takes to clear its
// record, whatever the traffic; a replica whose checks succeed is checked
// as before. Only reads that do not wait for the
// position (pgrouted_replica_wait) are concerned: a wait makes the check
// succeed at the cost of time, which its user chose.

const (
	// catchUpBuckets are the write ages a replica's record tells apart:
	// [0, catchUpFirst), then doubling ranges, the last one open.
	catchUpBuckets = 14
	catchUpFirst   = 32 * time.Microsecond
	// catchUpOne is a share of 1 in the record's fixed point.
	catchUpOne = 1 << 16
	// catchUpWeight: each check moves the shares it counts for (see
	// catchUp.record) by 1/2^catchUpWeight of the way to its outcome.
	catchUpWeight = 2
	// catchUpMaxMissed is the largest share of failed checks at which a
	// read still checks: a check more likely to fail than to find the
	// write is not sent. A failed check costs the replica about what the
	// read costs the primary, plus a round trip; one that succeeds saves
	// the primary the read, which is what replicas are for. Checking only
	// when nearly every check succeeds would spare the replicas more, but
	// load the primary with the reads right after a write that a replica
	// serves more often than not (make bench's read-your-writes workload:
	// 75% of reads on replicas at 0 ms of delay with checks kept at 90%
	// success, 91% with 50%; bench/RESULTS.md).
	catchUpMaxMissed = catchUpOne / 2
	// catchUpExplore: one read in catchUpExplore still checks a replica
	// whose checks mostly fail, so that its record follows it.
	catchUpExplore = 8
	// catchUpRecheck: a record no check has refreshed for that long no
	// longer stops a check.
	catchUpRecheck = time.Second
)

// catchUp is a replica's record of its position checks by write age.
type catchUp struct {
	buckets [catchUpBuckets]catchUpBucket
}

type catchUpBucket struct {
	missed atomic.Uint32 // share of failed checks, fixed point catchUpOne
	at     atomic.Int64  // when the last check was recorded (ns since clockBase)
}

// catchUpBucketOf is the bucket of a write age.
func catchUpBucketOf(age time.Duration) int {
	if age < catchUpFirst {
		return 0
	}
	return min(bits.Len64(uint64(age/catchUpFirst)), catchUpBuckets-1)
}

// worth reports whether a read at now whose last write is age old should
// check the replica's position: the replica's checks at that age mostly
// found the write, or there is no recent record.
func (c *catchUp) worth(age time.Duration, now time.Time) bool {
	b := &c.buckets[catchUpBucketOf(age)]
	return b.missed.Load() <= catchUpMaxMissed || time.Duration(int64(now.Sub(clockBase))-b.at.Load()) > catchUpRecheck
}

// worthChecking keeps, in place, the replicas of cand (all of which must
// check the position of a read at now whose last write is age old) whose
// checks at that age mostly succeed, or were not recorded lately. When none does, one such read in
// catchUpExplore (counted only with advance: Explain changes nothing)
// keeps them all, so that their records follow them.
func (c *Connector) worthChecking(cand []*hostView, age time.Duration, now time.Time, advance bool) []*hostView {
	kept := cand[:0]
	for _, h := range cand {
		if h.catchUp.worth(age, now) {
			kept = append(kept, h)
		}
	}
	if len(kept) == 0 && advance && c.catchUpSkips.Add(1)%catchUpExplore == 0 {
		return cand
	}
	return kept
}

// record adds the outcome of a check sent at sent when the caller's last
// write was age old: found when the replica had replayed it. Replay goes
// in WAL order, so the outcome holds beyond its own age: a replica that
// lacked a write lacked every younger one then (a later position), and
// one that held it held every older one. A check that found the write
// counts for its age and all older ones, one that did not for its age and
// all younger ones.
func (c *catchUp) record(age time.Duration, sent time.Time, found bool) {
	i, at := catchUpBucketOf(age), int64(sent.Sub(clockBase))
	if found {
		for j := i; j < catchUpBuckets; j++ {
			c.buckets[j].record(at, found)
		}
		return
	}
	for j := 0; j <= i; j++ {
		c.buckets[j].record(at, found)
	}
}

// record adds one outcome to b at at (ns since clockBase).
func (b *catchUpBucket) record(at int64, found bool) {
	b.at.Store(at)
	target := uint32(0)
	if !found {
		target = catchUpOne
	}
	for {
		cur := b.missed.Load()
		next := cur
		if target > cur {
			next += (target - cur + (1<<catchUpWeight - 1)) >> catchUpWeight
		} else {
			next -= (cur - target + (1<<catchUpWeight - 1)) >> catchUpWeight
		}
		if next == cur || b.missed.CompareAndSwap(cur, next) {
			return
		}
	}
}

// recordCheck adds the outcome of a position check sent at sent on h for
// a read whose caller wrote at wrote (zero: not recorded; see
// target.wrote), when the check did not wait: err is the check's (nil:
// found; errNotCaughtUp: not found; anything else tells nothing).
func (h *host) recordCheck(wrote time.Time, wait time.Duration, sent time.Time, err error) {
	if wrote.IsZero() || wait > 0 {
		return
	}
	switch {
	case err == nil:
		h.catchUp.record(sent.Sub(wrote), sent, true)
	case errors.Is(err, errNotCaughtUp):
		h.catchUp.record(sent.Sub(wrote), sent, false)
	}
}
