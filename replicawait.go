package pgrouted

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/lagmeter"
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
// bounded by the wait (waitSQL). Only PostgreSQL 15 runs here: the WAIT FOR
// form is chosen by the server's version, and is not exercised by the
// tests; the benchmark measures the polling form.
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
// probe or a check) or its server restarted.

// waitFor is how long a read planned with pk may wait on its replica:
// only a checked read (the replica may not hold the caller's position yet)
// waits, and not on a replica known to lag more than the wait.
func (c *Connector) waitFor(ctx context.Context, pk pick) time.Duration {
	if !pk.check || pk.wm.IsZero() {
		return 0
	}
	d := c.replicaWait(ctx)
	if d <= 0 {
		return 0
	}
	if h := pk.host; !h.waitable() || c.lagFloor(h) > d {
		return 0
	}
	return d
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
}

// waitable reports whether a read may wait on h: not while a wait on it
// missed a position that h is not yet known to have replayed.
func (h *hostView) waitable() bool {
	m := h.missed.Load()
	return m == nil || m.conn != h.probe.Conn || h.replay() >= m.lsn
}

// noteMiss records that a wait on h (probe connection conn) ended before
// h replayed lsn.
func (h *host) noteMiss(conn uint64, lsn lagmeter.LSN) {
	h.missed.Store(&waitMiss{conn: conn, lsn: lsn})
}

// waited accounts for a position check on h (probe connection conn) that
// could wait up to wait for wm, sent at start and answered with err: a
// wait counted in Stats, and a miss noted on h (see waitable).
// It returns the wait's duration, 0 when there was none.
func (c *Connector) waited(h *host, conn uint64, wm lagmeter.Watermark, wait time.Duration, start time.Time, err error) time.Duration {
	if wait <= 0 || (err != nil && !errors.Is(err, errNotCaughtUp)) {
		return 0
	}
	d := time.Since(start)
	c.noteWait(d, err == nil)
	if err != nil {
		h.noteMiss(conn, wm.LSN)
	}
	return d
}

// waitCounters are the replica wait's Stats.
type waitCounters struct {
	waits    atomic.Uint64 // reads that waited on a replica
	timeouts atomic.Uint64 // waits that ended without the position
	nanos    atomic.Uint64 // their total duration
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

// waitForLSNVersion is the first server_version_num with WAIT FOR LSN.
const waitForLSNVersion = 190000

// hasWaitFor reports whether the server of pc has WAIT FOR LSN.
func hasWaitFor(pc *pgconn.PgConn) bool {
	return serverMajor(pc.ParameterStatus("server_version"))*10000 >= waitForLSNVersion
}

// serverMajor is the major version in a server_version ("15.18 (Debian
// 15.18-0+deb12u1)", "19beta1"), or 0.
func serverMajor(v string) int {
	end := 0
	for end < len(v) && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(v[:end])
	return n
}

// waitStepMs is the polling step of waitSQL: pg_sleep sleeps in whole
// milliseconds.
const waitStepMs = 1

// behindMark starts the error a replica's position check raises when the
// replica lacks the caller's writes; the replay position follows it.
const behindMark = "pgrouted: replica behind at "

// replayAnswer is the answer of the position statements (checkSQL,
// waitSQL) on a replay position r: r as text when it is at or past lsn,
// else a failing cast whose error's text carries r after behindMark. The
// cast depends on the row, so the planner cannot fold it.
func replayAnswer(lsn lagmeter.LSN) string {
	return fmt.Sprintf(`CASE WHEN r >= '%s' THEN r::text ELSE (%s || coalesce(r::text, 'none'))::pg_lsn::text END`, lsn, quoteLiteral(behindMark))
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// checkSQL is the check of a replica's replay position against a
// watermark's position lsn: it answers the position when the replica has
// replayed up to lsn, and fails otherwise (replayAnswer), so that a read
// pipelined after it in the same implicit transaction does not run.
func checkSQL(lsn lagmeter.LSN) string {
	return `SELECT ` + replayAnswer(lsn) + ` FROM pg_last_wal_replay_lsn() AS r`
}

// positionSQL is the statement that checks, or waits up to wait for, the
// replica's replay position to reach lsn on pc (see checkSQL, waitSQL).
func positionSQL(pc *pgconn.PgConn, lsn lagmeter.LSN, wait time.Duration) string {
	switch {
	case wait <= 0:
		return checkSQL(lsn)
	case hasWaitFor(pc):
		return waitForSQL(lsn, wait)
	}
	return waitSQL(lsn, wait)
}

// waitSQL waits up to wait for the replica's replay position to reach lsn,
// then answers as checkSQL does: the position when it reached lsn, else an
// error whose text carries the position (behindMark). It is one query, for
// servers without WAIT FOR LSN: rows of a series, each reading
// pg_last_wal_replay_lsn() after a pg_sleep of waitStepMs (none for the
// first), the first row at or past lsn or past the deadline taken (LIMIT
// 1), so it ends as soon as the position is replayed. The replay function
// is VOLATILE, so the planner re-reads it on every row; the lateral
// subquery depends on the row, so the sleep runs on every row.
func waitSQL(lsn lagmeter.LSN, wait time.Duration) string {
	steps := int64(wait/(waitStepMs*time.Millisecond))*2 + 2
	return `SELECT ` + replayAnswer(lsn) + ` ` +
		fmt.Sprintf(`FROM (SELECT w.r FROM generate_series(0, %[2]d) AS g, `+
			`LATERAL (SELECT pg_last_wal_replay_lsn() AS r FROM pg_sleep(CASE WHEN g = 0 THEN 0 ELSE %[3]g END)) AS w `+
			`WHERE w.r >= '%[1]s' OR g = %[2]d OR clock_timestamp() >= statement_timestamp() + interval '%[4]d microseconds' LIMIT 1) AS x`,
			lsn, steps, float64(waitStepMs)/1000, wait.Microseconds())
}

// waitForSQL is waitSQL for PostgreSQL 19 and later: WAIT FOR LSN, which
// fails when the wait times out or the server leaves recovery, so that the
// read pipelined after it does not run (see waitForMissed).
func waitForSQL(lsn lagmeter.LSN, wait time.Duration) string {
	return fmt.Sprintf(`WAIT FOR LSN '%s' WITH (TIMEOUT '%dms')`, lsn, max(wait.Milliseconds(), 1))
}

// waitForMissed reports whether err is WAIT FOR LSN's failure to see the
// position: a timeout, a server that left recovery, or a refusal to wait
// (the statement's rules cannot be tried here, see the file comment). The
// read after it in the pipeline did not run; the caller reads elsewhere.
func waitForMissed(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return strings.Contains(pe.Message, "target LSN") || strings.Contains(pe.Message, "WAIT FOR") ||
		strings.Contains(pe.Message, "recovery is not in progress") ||
		strings.HasPrefix(pe.Code, "25") || strings.HasPrefix(pe.Code, "55")
}
