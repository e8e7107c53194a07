package lagmeter

import (
	"math"
	"strconv"
	"time"
)

// Position is what is known of a replica's replay position. Zero fields are
// unknown.
type Position struct {
	// SystemID is the replica's system identifier (pg_control_system()).
	SystemID uint64

	// Timeline is the timeline of the WAL the replica follows
	// (pg_stat_wal_receiver.received_tli, which only roles with
	// pg_read_all_stats can see).
	Timeline uint32

	// Replay is pg_last_wal_replay_lsn(). The caller sets it to 0 whenever
	// it cannot vouch for it: never probed, last probe failed, the replica
	// left recovery (promoted), or its postmaster restarted or its
	// connection was re-established since it was read (after a restart a
	// standby's visible state can go back to its minimum recovery point).
	Replay LSN

	// Xmin is the xmin of the replica's transaction snapshot
	// (pg_snapshot_xmin(pg_current_snapshot()) on the standby, a 64-bit
	// transaction ID), 0 when unknown: every transaction with an ID below
	// it has completed there, its commit replayed. The caller vouches for
	// it as for Replay. See [History.Lag] for what it proves.
	Xmin uint64
}

// ByteLag returns how many bytes of WAL the replica at replay lacks to
// reach primaryInsert, 0 when it is there or past it, and false when either
// position is 0 (unknown).
//
// Measured against a raw pg_current_wal_insert_lsn(), a caught-up replica
// of an idle primary can show a page header (24 or 40 bytes) of lag; pass
// the primary's position through [WALLayout.RecordEnd] to avoid it, as
// [History.Lag] does.
func ByteLag(primaryInsert, replay LSN) (uint64, bool) {
	if primaryInsert == 0 || replay == 0 {
		return 0, false
	}
	return primaryInsert.Sub(replay), true
}

// Unbounded is the [Lag].Time of a replica whose position is known but
// older than every sample the history keeps: no bound can be proven, and it
// is outside every time budget.
const Unbounded = time.Duration(math.MaxInt64)

// Lag is what is known of one replica's lag at one instant.
type Lag struct {
	// Bytes is the byte lag behind the newest primary sample; meaningful
	// when BytesKnown.
	Bytes      uint64
	BytesKnown bool

	// Time is an upper bound on the replica's staleness, [Unbounded] when
	// it is behind every sample kept; meaningful when TimeKnown.
	Time      time.Duration
	TimeKnown bool
}

// Lag measures the replica at p against the history at now: byte lag
// behind the newest sample, and a staleness bound: the smaller of
// [History.StalenessBound] (or [Unbounded] for a replica behind every sample
// kept) and, when p.Xmin is known, the transaction-ID bound below.
//
// The transaction-ID bound covers what the WAL position cannot: the
// primary's insert position also counts WAL that no standby can have yet,
// because PostgreSQL has not flushed it and will not until the next commit
// or its background writer's next standby snapshot (up to 15 s later):
// the records of a transaction still open, and those of a transaction
// without a transaction ID that rolled back after writing some (hint bits
// logged under wal_log_hints or data checksums, a page pruned by a read
// that then failed, an autovacuum cancelled by a lock request). While such
// WAL is pending, no replica reaches the samples taken since, and a
// connector that started then has no older sample: every replica would be
// [Unbounded]. Yet the replica may hold every commit. A sample's Xmax was
// read after its send time, so every transaction acknowledged as committed
// before Sent has an ID below Xmax; a replica whose snapshot xmin is at or
// above that Xmax has completed, and so replayed the commit of, every
// transaction below it. Its staleness now is at most now - Sent, with no
// clock compared across machines. The newest sample whose Xmax the
// replica's xmin reached gives the bound: a binary search (xmax never goes
// back), made only when the position bound is not the newest sample's.
// Without it, a write committed in the probe interval after a connector
// started behind pending WAL would take every replica out (its xmax past
// the replicas' last probed xmin, every older sample ahead of their
// replay) until their next probe.
//
// Both are unknown when p.Replay is 0, when the history is empty, or when
// p does not follow the history's primary: a system identifier or timeline
// the history's [Origin] knows must be known and equal in p. (A replica
// left on an old timeline can have replayed past the new primary's
// positions on WAL the new primary never had.)
//
// The byte lag is measured against the newest sample, which ages when the
// primary's probes stop; the time bound grows then, the byte lag does not.
// A caller using a byte budget alone must stop trusting the history when
// the primary's lease lapses ([History.Reset] it).
//
// Lag is safe for concurrent use and does not allocate.
func (h *History) Lag(p Position, now time.Time) Lag {
	st := h.load()
	if p.Replay == 0 || len(st.samples) == 0 || !st.origin.follows(p) {
		return Lag{}
	}
	last := len(st.samples) - 1
	newest := &st.samples[last]
	l := Lag{Bytes: newest.end.Sub(p.Replay), BytesKnown: true, TimeKnown: true, Time: Unbounded}
	i := last // a replica that replayed all the newest sample shows: most reads
	if p.Replay < newest.end {
		i = newestAtOrBefore(st.samples, p.Replay)
	}
	if i >= 0 {
		l.Time = since(now, st.samples[i].sent)
	}
	if i == last || p.Xmin == 0 {
		// The newest sample bounds it (no xmax proves more), or its
		// snapshot is unknown.
		return l
	}
	if j := newestXmaxAtOrBelow(st.samples, p.Xmin); j >= 0 {
		l.Time = min(l.Time, since(now, st.samples[j].xsent))
	}
	return l
}

// follows reports whether a replica at p is known to follow the WAL history
// of o, as far as o knows it.
func (o Origin) follows(p Position) bool {
	return (o.SystemID == 0 || o.SystemID == p.SystemID) &&
		(o.Timeline == 0 || o.Timeline == p.Timeline)
}

// Check decides whether the replica at p is inside budget b at now: it is
// [Budget.Allows] applied to [History.Lag]. The zero budget admits every
// replica without looking at it. It is the per-read check: safe for
// concurrent use, without lock or allocation.
//
// Check is only the staleness gate: the caller also requires the replica
// to be healthy and in recovery, and to have reached the session's
// [Watermark].
func (h *History) Check(p Position, b Budget, now time.Time) (bool, Reason) {
	if b.IsZero() {
		return true, ReasonNone
	}
	return b.Allows(h.Lag(p, now))
}

// Budget is how stale a replica may be to serve a read. A zero field is no
// limit on that measure; the zero Budget admits every replica, including
// one whose position is unknown.
type Budget struct {
	// MaxTime is the longest staleness allowed (pgrouted_max_lag as a
	// duration, WithMaxLag). It must exceed the probe interval, or even a
	// caught-up replica fails it between probes. A negative MaxTime admits
	// nothing.
	MaxTime time.Duration

	// MaxBytes is the largest byte lag allowed (pgrouted_max_lag as a
	// size).
	MaxBytes uint64
}

// IsZero reports whether b sets no limit.
func (b Budget) IsZero() bool { return b == Budget{} }

// Min returns the budget that satisfies both b and o: for each measure the
// smaller limit, a zero (no) limit giving way to the other's. It combines
// the connector's pgrouted_max_lag with a per-request budget.
func (b Budget) Min(o Budget) Budget {
	if o.MaxTime != 0 && (b.MaxTime == 0 || o.MaxTime < b.MaxTime) {
		b.MaxTime = o.MaxTime
	}
	if o.MaxBytes != 0 && (b.MaxBytes == 0 || o.MaxBytes < b.MaxBytes) {
		b.MaxBytes = o.MaxBytes
	}
	return b
}

// Allows decides a replica with lag l against b:
//   - a measure b limits and l knows to exceed the limit: false,
//     [ReasonBehind] (this wins over an unknown measure);
//   - a measure b limits and l does not know: false,
//     [ReasonPositionUnknown]. Unknown is never eligible while a limit is
//     set: unknown position is not zero lag;
//   - otherwise true, [ReasonNone]. Lag equal to the limit is inside it.
//
// Measures b does not limit are ignored, known or not.
func (b Budget) Allows(l Lag) (bool, Reason) {
	timeSet, bytesSet := b.MaxTime != 0, b.MaxBytes != 0
	if (timeSet && l.TimeKnown && l.Time > b.MaxTime) ||
		(bytesSet && l.BytesKnown && l.Bytes > b.MaxBytes) {
		return false, ReasonBehind
	}
	if (timeSet && !l.TimeKnown) || (bytesSet && !l.BytesKnown) {
		return false, ReasonPositionUnknown
	}
	return true, ReasonNone
}

// Reason says why a replica is not eligible, or has not reached a
// watermark. The zero Reason means it is eligible.
type Reason uint8

const (
	// ReasonNone: eligible, or the watermark is reached.
	ReasonNone Reason = iota

	// ReasonBehind: the replica's position is known and not good enough
	// (yet).
	ReasonBehind

	// ReasonPositionUnknown: the replica's position, or whether it
	// follows the right WAL history, is not known.
	ReasonPositionUnknown

	// ReasonForeign: the replica belongs to another cluster (another
	// system identifier) than the watermark. The driver reports it as
	// position-unknown.
	ReasonForeign

	// ReasonDiverged: the watermark lies on an older timeline beyond the
	// point where the replica's history left that timeline: the write it
	// stands for is not in that history, and may have been lost with the
	// old primary. No replica of that history will ever reach it; the
	// driver must tell the application, not wait.
	ReasonDiverged
)

// String returns "" for ReasonNone, "behind", "position-unknown",
// "foreign-system" or "diverged". The first two are the driver's route
// reasons of the same name.
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return ""
	case ReasonBehind:
		return "behind"
	case ReasonPositionUnknown:
		return "position-unknown"
	case ReasonForeign:
		return "foreign-system"
	case ReasonDiverged:
		return "diverged"
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }
