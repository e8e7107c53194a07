package pgrouted

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/topology"
)

// This file is the replica wait (pgrouted_replica_wait, WithReplicaWait):
// a read whose replica has not been proven to hold the caller's writes
// (a checked read, see pickReplica) may wait on that replica, up to the
// wait, for its replay to reach the caller's position, instead of going to
// the primary. The wait replaces the position check on the replica's
// connection: it is sent in the same pipeline as the read, so a read that
// waits costs no extra round trip, and the server skips the read when the
// wait ends without the position (errNotCaughtUp, as for the check). It
// never serves a stale row: the read runs only after the replica showed
// the position, on the same connection, in the same implicit transaction.
//
// PostgreSQL 19 has WAIT FOR LSN for this; on older servers the wait is a
// query that polls pg_last_wal_replay_lsn() with pg_sleep in 1 ms steps,
// bounded by the wait (the SQL is internal/pgpipe's, replay.go). The tests
// run the polling form on PostgreSQL 13 to 18 (make test-versions); the
// WAIT FOR form is chosen by the server's version, and is not exercised by
// the tests; the benchmark measures the polling form.
//
// Neither compares timelines (WAIT FOR LSN is timeline-blind too): the
// caller's watermark is checked against the replica's system and timeline
// from the topology first (mayReach), as for the check.
//
// A replica that lags more than the wait is not waited on (reads check it
// once and go to the primary, as without a wait): one whose last probe
// found it lacking WAL the primary had written more than the wait before
// (lagmeter.History.LagFloor), and one on which a wait ended without the
// position, until it is seen at or past the position it missed (by a
// probe or a check) or its server restarted, or until a primary probe
// shows that the position it missed was not written (a forged one). A
// miss counts only for a position the primary is known to have written
// when the wait ended (Connector.knownPosition): a token's position that
// nobody wrote (a forged one) stops nobody's waits.
//
// Waits hold at most half of a replica's pool (pgrouted_replica_max_conns
// / 2, at least one connection): a read planned to wait takes one of the
// replica's wait slots (waitSlots), and gives it back when its wait ends;
// when none is free it does not wait (it checks the replica once, as
// without a wait), so that reads that need no wait keep the rest of the
// pool. A slot whose read never waited (it failed before, or ran
// elsewhere) frees itself once the wait would have ended.

// waitFor is how long a read with intent in, planned with pk, may wait on its replica:
// only a checked read (the replica may not hold the caller's position yet)
// waits, and not on a replica known to lag more than the wait, nor on one
// whose replay pace says it will not reach the position within the wait
// (replayPace).
func (c *Connector) waitFor(in *consistency.Intent, pk pick) time.Duration {
	if !pk.check || pk.wm.IsZero() {
		return 0
	}
	d := in.Wait
	if d <= 0 {
		return 0
	}
	h := pk.host
	if !h.mayReach(pk.wm) || !h.waitable() || c.lagFloor(h) > d {
		// A replica that cannot hold the position (another system, a
		// timeline not in its history) is not waited on at all.
		return 0
	}
	if need, ok := h.pace.need(pk.wm.LSN, h.replay(), time.Now()); ok && need > d {
		// Its pace says it will not have the position in time.
		if !in.DryRun {
			c.counters.wait.skipped.Add(1)
		}
		return 0
	}
	if !in.DryRun && !h.waits.take(time.Now(), d, h.maxConns) {
		return 0
	}
	return d
}

// waitSlack is how long after its wait would have ended a wait slot taken
// for a read that never waited frees itself: the read's borrow and the
// round trip of its wait fit in it.
const waitSlack = time.Second

// waitSlots are a replica's slots for reads that wait on it: half its
// pool, at least one. Each is free, or taken until a time (the end of the
// wait it was taken for, plus waitSlack).
type waitSlots struct {
	mu    sync.Mutex
	until []time.Time
}

// take takes a free slot at now for a wait of up to d, and reports
// whether there was one; a pool of maxConns connections has half as many
// slots, at least one.
func (s *waitSlots) take(now time.Time, d time.Duration, maxConns int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.until == nil {
		s.until = make([]time.Time, max(maxConns/2, 1))
	}
	for i, u := range s.until {
		if !u.After(now) {
			s.until[i] = now.Add(d + waitSlack)
			return true
		}
	}
	return false
}

// give frees a slot at now, after a wait ended: the taken one that frees
// itself first (the slots are alike; that one is the oldest wait's, or
// the one of a read that never waited).
func (s *waitSlots) give(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := -1
	for i, u := range s.until {
		if u.After(now) && (j < 0 || u.Before(s.until[j])) {
			j = i
		}
	}
	if j >= 0 {
		s.until[j] = time.Time{}
	}
}

// lagFloor is a lower bound on the replay delay of the standby h from its
// last probe (see lagmeter.History.LagFloor), or 0 when none is known: when
// its probe failed, or a check since saw it further.
func (c *Connector) lagFloor(h *hostView) time.Duration {
	st := h.probe
	if !st.Healthy || h.replay() != st.ReplayLSN || h.v.primary == nil {
		return 0
	}
	d, _ := c.history.LagFloor(st.ReplayLSN, st.LastSuccess, h.v.primary.probe.RTT)
	return d
}

// waitMiss is a position a wait on a host did not see replayed in time.
type waitMiss struct {
	conn uint64 // the host's probe connection incarnation then
	lsn  lagmeter.LSN
	at   time.Time // when the wait ended
}

// waitable reports whether a read may wait on h: not while a wait on it
// missed a position that h is not yet known to have replayed, unless a
// primary probe sent after the miss found the primary short of that
// position: nobody had written it (a forged token's), so the miss says
// nothing of h's lag, and h would otherwise never replay it.
func (h *hostView) waitable() bool {
	m := h.missed.Load()
	if m == nil || m.conn != h.probe.Conn || h.replay() >= m.lsn {
		return true
	}
	p := h.v.primary
	if p == nil {
		return false
	}
	return p.probe.InsertLSN != 0 && p.probe.LastSuccess.After(m.at) && h.v.walEnd < m.lsn
}

// noteMiss records that a wait on h (probe connection conn) ended before
// h replayed wm, when the primary is known to have written wm (on the
// history of known, the newest position of the primary known, at or
// before it): a position nobody wrote says nothing of h's lag.
func (h *host) noteMiss(conn uint64, wm, known lagmeter.Watermark) {
	if consistency.Reached(wm, known) {
		h.missed.Store(&waitMiss{conn: conn, lsn: wm.LSN, at: time.Now()})
	}
}

// waited accounts for a position check on h (probe connection conn) that
// could wait up to wait for wm, sent at start and answered with err: a
// wait counted in Stats, and a miss noted on h (see waitable) when the
// primary is known to have written wm (a position nobody wrote says
// nothing of h's lag). It returns the wait's duration, 0 when there was
// none.
func (c *Connector) waited(h *host, conn uint64, wm lagmeter.Watermark, wait time.Duration, start time.Time, err error) time.Duration {
	if wait <= 0 {
		return 0
	}
	h.waits.give(time.Now())
	if err != nil && !errors.Is(err, errNotCaughtUp) {
		return 0
	}
	d := time.Since(start)
	c.noteWait(d, err == nil)
	if err != nil {
		h.noteMiss(conn, wm, c.knownPosition(c.view()))
	}
	return d
}

// waitCounters are the replica wait's Stats.
type waitCounters struct {
	waits    atomic.Uint64 // reads that waited on a replica
	timeouts atomic.Uint64 // waits that ended without the position
	nanos    atomic.Uint64 // their total duration
	skipped  atomic.Uint64 // reads not waited on: their replica's pace said it would not reach the position in time (replayPace)
}

// noteWait counts one wait of d, a timeout unless reached.
func (c *Connector) noteWait(d time.Duration, reached bool) {
	k := &c.counters.wait
	k.waits.Add(1)
	k.nanos.Add(uint64(max(d, 0)))
	if !reached {
		k.timeouts.Add(1)
	}
}

// replayPace is what a standby's last two probes showed of its replay,
// for the predictive wait (Connector.waitFor): whether its replay moves,
// and how fast, while it has WAL to replay.
//
// A read waits on a replica only when the replica's pace says it will
// replay the read's position within the wait: a replica whose replay did
// not move between its last two probes while it had received WAL it had
// not replayed (replay paused, or stuck behind a conflict) will not, nor
// one that had WAL to replay at both probes and replays too slowly to
// reach the position in time (its position, extrapolated at the rate
// between the two probes). A replica with nothing to replay at its probes
// (caught up: its rate is the primary's, not its own) is judged as before
// (the lag floor, the last wait's miss). The read then checks the replica
// without waiting, and another replica, or the primary, serves it at once.
type replayPace struct {
	mu             sync.Mutex
	prevAt, lastAt time.Time    // the probes' send times (HostState.LastSuccess)
	prev, last     lagmeter.LSN // their replay positions
	prevPending    bool         // WAL received and not replayed at the probe before last
	lastPending    bool         // ... at the last probe
	conn           uint64       // the probe connection (a restart starts over)
}

// observe takes the standby's last probe st into p, when it is a new one:
// each view of a new topology snapshot does (newView).
func (p *replayPace) observe(st *topology.HostState) {
	if !st.Healthy || st.ReplayLSN == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if st.Conn == p.conn && !st.LastSuccess.After(p.lastAt) {
		return // seen already, or an older snapshot's
	}
	if st.Conn != p.conn {
		p.lastAt, p.last, p.lastPending = time.Time{}, 0, false
	}
	p.prevAt, p.prev, p.prevPending = p.lastAt, p.last, p.lastPending
	p.lastAt, p.last, p.lastPending, p.conn = st.LastSuccess, st.ReplayLSN, st.ReceiveLSN > st.ReplayLSN, st.Conn
}

// need is how long the standby, known now to have replayed up to replay,
// will take to replay wm by its pace, and whether its pace tells:
// forever (stalled) when its replay did not move between its last two
// probes with WAL to replay.
func (p *replayPace) need(wm, replay lagmeter.LSN, now time.Time) (time.Duration, bool) {
	if replay >= wm {
		return 0, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prevAt.IsZero() || replay > p.last || !p.prevPending || !p.lastPending {
		// No pace yet, or it moved since (a check saw it further), or it
		// had nothing to replay at a probe.
		return 0, false
	}
	dt := p.lastAt.Sub(p.prevAt)
	if dt <= 0 || p.last < p.prev {
		return 0, false
	}
	if p.last == p.prev {
		return neverReached, true
	}
	rate := float64(p.last-p.prev) / dt.Seconds() // bytes per second
	est := float64(p.last) + rate*max(now.Sub(p.lastAt), 0).Seconds()
	if est >= float64(wm) {
		return 0, true
	}
	return time.Duration((float64(wm) - est) / rate * float64(time.Second)), true
}

// neverReached is replayPace.need's answer for a stalled standby.
const neverReached = time.Duration(1<<63 - 1)
