package lagmeter

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCapacity is the number of samples a [History] keeps unless told
// otherwise: a little over four minutes at the default 1 s probe interval,
// more than any useful staleness budget.
const DefaultCapacity = 256

// Errors from [History.Append]. The sample is not recorded and the history
// is unchanged.
var (
	// ErrInvalidSample: the sample's LSN is 0 (unknown) or its send time
	// is the zero time.
	ErrInvalidSample = errors.New("lagmeter: invalid sample")

	// ErrOutOfOrder: the sample was sent before the newest sample kept.
	ErrOutOfOrder = errors.New("lagmeter: sample sent before the newest one kept")

	// ErrLSNWentBack: the sample's position is lower than the newest
	// sample's. The primary is not the one sampled so far (a failover to a
	// new timeline, another server at that address): the caller must
	// [History.Reset] the history before appending that primary's samples.
	ErrLSNWentBack = errors.New("lagmeter: primary WAL position went back; Reset the history for the new primary")
)

// Sample is one probe of the primary.
type Sample struct {
	// Sent is when the probe was sent, read from the local clock before
	// the query left (time.Now(), with its monotonic reading): anything
	// acknowledged before Sent was inserted before the probe read LSN.
	Sent time.Time

	// LSN is the primary's pg_current_wal_insert_lsn() read by that probe.
	LSN LSN

	// Xmax is the xmax of the primary's transaction snapshot read by that
	// probe (pg_snapshot_xmax(pg_current_snapshot()), a 64-bit
	// transaction ID), 0 when unknown: every transaction that had
	// completed before Sent has an ID below it. See [History.Lag] for
	// what it proves.
	Xmax uint64
}

// Origin is what a [History]'s samples belong to: one primary's WAL
// history. Zero fields are unknown.
type Origin struct {
	// SystemID is the cluster's system identifier. When it is known,
	// [History.Lag] only measures replicas of the same system.
	SystemID uint64

	// Timeline is the primary's timeline. When it is known,
	// [History.Lag] only measures replicas on the same timeline: the
	// positions of another timeline do not hold the same WAL.
	Timeline uint32

	// Layout is the cluster's WAL layout, used to convert each sample's
	// insert position with [WALLayout.RecordEnd].
	Layout WALLayout
}

// sample is a Sample with its position converted to a record end, and
// the newest snapshot xmax known when it was appended.
type sample struct {
	sent time.Time
	lsn  LSN // as sampled
	end  LSN // Origin.Layout.RecordEnd(lsn), what replay positions are compared with
	xmax uint64
	// xk is the xmax of the newest sample up to this one that knew one
	// (this one's when it did; 0 when none did), and xsent that sample's
	// send time: non-decreasing from sample to sample, so that
	// [History.Lag] binary-searches them (newestXmaxAtOrBelow).
	xk    uint64
	xsent time.Time
}

// state is one immutable version of a History, published whole.
type state struct {
	origin  Origin
	samples []sample // oldest first; sent and end non-decreasing; never written after publication
}

// History is a bounded record of the primary's WAL insert position over
// time, from which [History.StalenessBound] derives how stale a replica
// can be without comparing clocks across machines.
//
// One goroutine (the topology tracker) appends; any number read
// concurrently. Reads load one atomic pointer to an immutable state and
// binary-search it: no lock, no allocation, no retry. Appends copy nothing
// in the common case: samples go into a backing array twice the capacity,
// into slots past everything published, and a new state header pointing at
// the last Capacity of them is published; when the array is full the newest
// Capacity-1 samples move to a fresh one (amortised O(1) per append, one
// small allocation per append). Writers are serialised by a mutex readers
// never touch.
//
// Samples must be appended in send-time order, with non-decreasing
// positions, all from the same primary; see [History.Append] and
// [History.Reset]. When more than the capacity have been appended the
// oldest are dropped: a replica older than every sample kept then has no
// proven bound, which makes it ineligible, never wrongly fresh.
//
// The zero History is empty, has capacity [DefaultCapacity] and an unknown
// origin, and is ready to use. A History must not be copied after first use.
type History struct {
	cur atomic.Pointer[state]

	mu         sync.Mutex // serialises writers
	capacity   int        // 0: DefaultCapacity
	buf        []sample   // backing array, len 2*capacity; slots >= end are unpublished
	start, end int        // buf[start:end] is the newest published state's samples
}

// NewHistory returns an empty History keeping up to capacity samples
// ([DefaultCapacity] when capacity <= 0). To cover a staleness budget B at
// probe interval I, capacity should exceed B/I plus a few samples.
func NewHistory(capacity int) *History {
	if capacity < 0 {
		capacity = 0
	}
	return &History{capacity: capacity}
}

// Capacity returns the number of samples h keeps.
func (h *History) Capacity() int {
	if h.capacity <= 0 {
		return DefaultCapacity
	}
	return h.capacity
}

var emptyState state

func (h *History) load() *state {
	if s := h.cur.Load(); s != nil {
		return s
	}
	return &emptyState
}

// Reset empties the history and starts sampling the primary identified by
// o. The caller must call it whenever the primary changes: another host
// became primary, the timeline changed (a promotion), or the system
// identifier changed. Positions of different WAL histories are not
// comparable (after a promotion the new primary's positions continue from
// the switch point, below what the old primary may have reached), so
// samples of the old primary must not be used for replicas of the new one.
//
// Until the first sample of the new primary is appended every replica is
// unknown. An invalid o.Layout is replaced with the unknown layout and
// reported; the history is reset anyway.
func (h *History) Reset(o Origin) error {
	err := o.Layout.Validate()
	if err != nil {
		o.Layout = WALLayout{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// Published states may still be read; new samples go past them.
	h.start = h.end
	h.cur.Store(&state{origin: o})
	return err
}

// Origin returns the origin given to the last [History.Reset], or the zero
// Origin.
func (h *History) Origin() Origin { return h.load().origin }

// Append records a sample of the current primary. Samples must come in
// send-time order with non-decreasing positions; a sample that breaks
// either rule is not recorded and Append says why:
//   - [ErrOutOfOrder] for a sample sent before the newest one kept (a late
//     probe result): dropping it only makes bounds more conservative;
//   - [ErrLSNWentBack] for a position lower than the newest one kept: that
//     is another WAL history, and the caller must Reset for the new
//     primary. Until then no sample is recorded, so every bound keeps
//     growing and the gate closes by itself;
//   - [ErrInvalidSample] for a zero LSN or send time.
//
// A known Xmax lower than the newest sample's is another primary's too
// ([ErrLSNWentBack]): a primary's snapshot xmax never goes back.
//
// Equal positions are expected: an idle primary's insert position does not
// move.
func (h *History) Append(s Sample) error {
	if s.LSN == 0 || s.Sent.IsZero() {
		return fmt.Errorf("%w: LSN %v sent at %v", ErrInvalidSample, s.LSN, s.Sent)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := h.load()
	n := sample{sent: s.Sent, lsn: s.LSN, end: cur.origin.Layout.RecordEnd(s.LSN), xmax: s.Xmax, xk: s.Xmax, xsent: s.Sent}
	if k := len(cur.samples); k > 0 {
		last := cur.samples[k-1]
		if n.xmax == 0 {
			n.xk, n.xsent = last.xk, last.xsent
		}
		if n.sent.Before(last.sent) {
			return fmt.Errorf("%w: sent %v before %v", ErrOutOfOrder, n.sent, last.sent)
		}
		if n.lsn < last.lsn || n.end < last.end {
			return fmt.Errorf("%w: %v after %v", ErrLSNWentBack, n.lsn, last.lsn)
		}
		if n.xmax != 0 && n.xmax < last.xmax {
			return fmt.Errorf("%w: snapshot xmax %d after %d", ErrLSNWentBack, n.xmax, last.xmax)
		}
	}
	capacity := h.Capacity()
	if h.end == len(h.buf) {
		// Full (or first use): move the newest capacity-1 samples to a
		// fresh array. The old one stays intact for readers still on it.
		keep := min(h.end-h.start, capacity-1)
		buf := make([]sample, 2*capacity)
		copy(buf, h.buf[h.end-keep:h.end])
		h.buf, h.start, h.end = buf, 0, keep
	}
	h.buf[h.end] = n
	h.end++
	if h.end-h.start > capacity {
		h.start = h.end - capacity
	}
	h.cur.Store(&state{origin: cur.origin, samples: h.buf[h.start:h.end:h.end]})
	return nil
}

// Len returns the number of samples kept.
func (h *History) Len() int { return len(h.load().samples) }

// Spans reports whether the oldest sample kept was sent more than d
// before now. A replica behind every sample kept ([Unbounded]) lacks what
// the primary had written when that sample was read: when the history
// spans d, it is known to be more than about d behind; when it does not
// (a history just begun, or a short one), [Unbounded] says only that its
// staleness is not bounded yet.
func (h *History) Spans(d time.Duration, now time.Time) bool {
	s := h.load().samples
	return len(s) > 0 && now.Sub(s[0].sent) > d
}

// Newest returns the newest sample kept, or false when there is none.
func (h *History) Newest() (Sample, bool) {
	s := h.load().samples
	if len(s) == 0 {
		return Sample{}, false
	}
	return Sample{Sent: s[len(s)-1].sent, LSN: s[len(s)-1].lsn, Xmax: s[len(s)-1].xmax}, true
}

// Samples appends the samples kept, oldest first, to dst and returns the
// result. It is meant for snapshots and debugging, not the hot path.
func (h *History) Samples(dst []Sample) []Sample {
	for _, s := range h.load().samples {
		dst = append(dst, Sample{Sent: s.sent, LSN: s.lsn, Xmax: s.xmax})
	}
	return dst
}

// newestAtOrBefore returns the index of the newest sample whose record end
// is at or before replay, or -1.
func newestAtOrBefore(samples []sample, replay LSN) int {
	// Find the first sample past replay; the one before it is the answer.
	lo, hi := 0, len(samples)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if samples[m].end <= replay {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// newestXmaxAtOrBelow returns the index of the newest sample whose carried
// xmax (xk) is known and at or below xmin, or -1.
func newestXmaxAtOrBelow(samples []sample, xmin uint64) int {
	lo, hi := 0, len(samples)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if samples[m].xk <= xmin {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 || samples[lo-1].xk == 0 {
		return -1
	}
	return lo - 1
}

// StalenessBound returns an upper bound, at now, on the staleness of a
// replica of this history's primary that has replayed WAL up to replay
// (pg_last_wal_replay_lsn()), and false when no bound can be proven.
//
// It finds the newest sample whose position (converted with
// [WALLayout.RecordEnd]) is at or before replay. That sample's LSN was the
// primary's insert position when the probe ran, after it was sent: every
// commit acknowledged before the send time has its commit record before
// that position, so a replica past it has replayed, and shows, all of those
// commits. Whatever it lacks was acknowledged after the send time, so it is
// at most now - Sent stale. The bound needs no clock comparison between
// machines: both times are local, monotonic readings.
//
// The bound only grows while no new sample qualifies, so a gate built on it
// closes by itself when the probes of the primary stop. On an idle primary
// the position stays the same from sample to sample, so a caught-up replica
// (replay equal to it) qualifies on the newest sample and its bound stays
// about one probe interval.
//
// It returns false for replay 0 (unknown), an empty history, and a replica
// behind every sample kept (older samples may have been dropped: unknown,
// never optimistic). A sample sent after now gives a bound of 0.
//
// StalenessBound uses positions only: while the primary holds WAL it has
// not flushed, no replica reaches its newest samples; [History.Lag] also
// proves a bound from transaction IDs then. StalenessBound does not check
// that the replica follows this history's primary (same system, same
// timeline); [History.Lag] does. It is safe for
// concurrent use and does not allocate.
func (h *History) StalenessBound(replay LSN, now time.Time) (time.Duration, bool) {
	if replay == 0 {
		return 0, false
	}
	s := h.load().samples
	i := newestAtOrBefore(s, replay)
	if i < 0 {
		return 0, false
	}
	return since(now, s[i].sent), true
}

// LagFloor returns a lower bound on the replay delay of a replica that had
// replayed only up to replay at time at (a standby probe sent at at that
// read replay), and false when none can be proven.
//
// The oldest sample whose position is past replay was read by a probe
// sent at its Sent time, answered at most rtt later (rtt bounds the
// primary probe's round trip): that WAL existed then, and the replica had
// not replayed it at at. So WAL reaches it at least at - (Sent + rtt) after
// it is written, and a read that needs WAL written now waits at least that
// long on it. It returns false when no sample kept is past replay, or the
// bound is not positive. Like StalenessBound it does not allocate.
func (h *History) LagFloor(replay LSN, at time.Time, rtt time.Duration) (time.Duration, bool) {
	if replay == 0 {
		return 0, false
	}
	s := h.load().samples
	i := newestAtOrBefore(s, replay) + 1
	if i >= len(s) {
		return 0, false
	}
	d := at.Sub(s[i].sent) - rtt
	if d <= 0 {
		return 0, false
	}
	return d, true
}

func since(now, t time.Time) time.Duration {
	if d := now.Sub(t); d > 0 {
		return d
	}
	return 0
}
