package consistency

import (
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
// right after a write). One read in ExploreEvery of those still checks,
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
	// CatchUp.Record) by 1/2^catchUpWeight of the way to its outcome.
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
	// ExploreEvery: one read in ExploreEvery still checks a replica
	// whose checks mostly fail, so that its record follows it.
	ExploreEvery = 8
	// catchUpRecheck: a record no check has refreshed for that long no
	// longer stops a check.
	catchUpRecheck = time.Second
)

// CatchUp is a replica's record of its position checks by write age.
type CatchUp struct {
	buckets [catchUpBuckets]catchUpBucket
}

type catchUpBucket struct {
	missed atomic.Uint32 // share of failed checks, fixed point catchUpOne
	at     atomic.Int64  // when the last check was recorded (ns since base)
}

// catchUpBucketOf is the bucket of a write age.
func catchUpBucketOf(age time.Duration) int {
	if age < catchUpFirst {
		return 0
	}
	return min(bits.Len64(uint64(age/catchUpFirst)), catchUpBuckets-1)
}

// Worth reports whether a read at now whose last write is age old should
// check the replica's position: the replica's checks at that age mostly
// found the write, or there is no recent record.
func (c *CatchUp) Worth(age time.Duration, now time.Time) bool {
	b := &c.buckets[catchUpBucketOf(age)]
	return b.missed.Load() <= catchUpMaxMissed || since(b.at.Load(), now) > catchUpRecheck
}

// Record adds the outcome of a check sent at sent for a read planned when
// the caller's last write was age old: found when the replica had replayed
// it. age is the age Worth was asked at, not the age when the check was
// sent: a read whose position is deferred reads it on the primary first
// and sends its check a round trip later (two behind a connection
// pooler), and a record by that later age never counts a check that found
// the write at the age reads ask about, only those that missed (they count
// for younger ages too, below), so the record of the first read after a
// write said "mostly missed" whatever the replica did. Replay goes in WAL
// order, and a read planned later sends its check later, so the outcome
// holds beyond its own age: a replica that lacked a write lacked every
// younger one then (a later position), and one that held it held every
// older one. A check that found the write counts for its age and all older
// ones, one that did not for its age and all younger ones.
func (c *CatchUp) Record(age time.Duration, sent time.Time, found bool) {
	i, at := catchUpBucketOf(age), nanos(sent)
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

// record adds one outcome to b at at (ns since base).
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

// Explore is a Connector's count of the reads that found no replica worth
// checking (CatchUp.Worth): one in ExploreEvery of them checks anyway,
// so that the replicas' records follow them.
type Explore struct{ n atomic.Uint32 }

// Explore reports whether this read, which found no replica worth
// checking, should check them all.
func (e *Explore) Explore() bool { return e.n.Add(1)%ExploreEvery == 0 }
