package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/circuit"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// This file is the replica path: a read (or the BEGIN of a read-only
// transaction) planned for a replica borrows a connection from that host's
// pool, checks the replica's replay position on it first when the plan
// asks, runs, and when the replica fails before any row, runs on another
// eligible replica, then falls back as the plan allows.

// replicaOutcome is what the replica path did with a statement planned
// for a replica: where it ran or was tried and what it learned (outcome);
// when it did not fail, whether it ran, or did not and the plan lets the
// primary run it (fallback, for reason).
type replicaOutcome struct {
	outcome
	fallback bool
	reason   Reason
	// refused: a replica refused the statement with SQLSTATE 25006: it
	// writes (see plan.toPrimary).
	refused bool
}

// onReplicas is the one route of a statement planned for a replica (an
// autocommit statement, the BEGIN of a read-only transaction, Prepare's
// describe): the replica path runs it, and when it falls back, p becomes
// the plan for the primary. done reports that the replica path ran it or
// failed (err is then the outcome); otherwise the caller runs it on the
// primary, as it does when p planned the primary from the start. o is
// the replica path's outcome (none when p planned the primary).
func (cn *conn) onReplicas(ctx context.Context, p *plan, cl *call) (o outcome, done bool, err error) {
	if p.primary {
		return outcome{}, false, nil
	}
	ro, err := cn.runOnReplicas(ctx, p, cl)
	if err != nil || !ro.fallback {
		return ro.outcome, true, err
	}
	p.toPrimary(ro)
	return ro.outcome, false, nil
}

// runOnReplicas runs cl on the replica p planned. When the replica's
// connection fails before any row, the standby cancels the read for a
// recovery conflict, or its check finds it without the caller's position
// (in time for the wait), it tries one other eligible replica. When a replica
// refuses the statement with SQLSTATE 25006 (it was not a read after all),
// is found behind by its check, or no replica could run it, the plan says
// whether the primary may run it instead (plan.fallback): the outcome then
// says so and why, else the error is the plan's. What happened on the way
// (the hosts tried, a retry, a wait) is the outcome's.
func (cn *conn) runOnReplicas(ctx context.Context, p *plan, cl *call) (o replicaOutcome, _ error) {
	at := p.replica
	for attempt := 0; ; attempt++ {
		h := at.host.host
		o.ran, o.primary = h, false
		err := cl.ex.refusal()
		if err == nil {
			var run outcome
			run, err = cn.runOnReplica(ctx, h, at, cl)
			o.outcome = o.then(run)
		}
		if err == nil {
			h.breaker.ReportSuccess()
			return o, nil
		}
		var ce *clientError
		if errors.As(err, &ce) {
			// No other host would do better, and this one is fine.
			return o, ce.err
		}
		if circuit.Classify(ctx, err) == circuit.Failure {
			h.breaker.ReportFailure()
		}
		f, retry, err := cn.replicaFailure(ctx, p, &at, cl, err, attempt)
		f.outcome = o.then(f.outcome)
		if o = f; !retry {
			return o, err
		}
	}
}

// replicaFailure handles err, the failure of attempt to run cl on the
// replica *at (not a client error: see clientError), as primaryFailed
// does on the primary. retry: cl runs again on another eligible replica,
// now in *at. Otherwise the outcome is final: a fallback to the primary
// that the plan p allows, with its reason, or the error (the plan's, or
// err). Its outcome says whether cl runs again (retried) and whether the
// replica's connection failed under it (replicaFailed).
func (cn *conn) replicaFailure(ctx context.Context, p *plan, at *target, cl *call, err error, attempt int) (_ replicaOutcome, retry bool, _ error) {
	h := at.host.host
	if errors.Is(err, errNotCaughtUp) {
		// It lacked the position (behind more than the wait, paused):
		// another replica that holds it serves it before the primary,
		// after a check of its own if its probe cannot prove it, which
		// waits only when this one did not (a replica known to lag
		// more than the wait is not waited on): a read waits once at
		// most.
		if attempt == 0 && ctx.Err() == nil {
			if next, ok := cn.c.replan(ctx, p, h, at.wait > 0); ok {
				*at = next
				return replicaOutcome{}, true, nil
			}
		}
		if ferr := p.fallback(ReasonBehind, nil); ferr != nil {
			return replicaOutcome{}, false, ferr
		}
		return replicaOutcome{fallback: true, reason: ReasonBehind}, false, nil
	}
	if readOnly25006(err) {
		// It wrote, through something the text and the catalog did not
		// show: the same text goes to the primary first from now on.
		cn.c.refused.add(cl.query)
		if ferr := p.fallback(ReasonRetry25006, err); ferr != nil {
			return replicaOutcome{}, false, ferr
		}
		return replicaOutcome{outcome: outcome{retried: true}, fallback: true, reason: ReasonRetry25006, refused: true}, false, nil
	}
	if ctx.Err() != nil || (!replicaRetryable(err) && !h.removed.Load()) {
		// A host removed from the provider's view (pgrouted_discover)
		// closes its pool, which cancels the dials in progress: that
		// read ran nowhere, it runs elsewhere too.
		return replicaOutcome{}, false, err
	}
	cn.c.top.ProbeNow(h.idx)
	failed := outcome{retried: true, replicaFailed: true}
	if attempt == 0 {
		if next, ok := cn.c.replan(ctx, p, h, false); ok {
			*at = next
			return replicaOutcome{outcome: failed}, true, nil
		}
	}
	if ferr := p.fallback(ReasonUnhealthy, err); ferr != nil {
		return replicaOutcome{outcome: failed}, false, ferr
	}
	return replicaOutcome{outcome: failed, fallback: true, reason: ReasonReplicaFailed}, false, nil
}

// runOnReplica runs cl on h (runOnReplicaOnce). When the server had ended
// the session of the connection it borrowed (sessionEnded: a restart, a
// fast shutdown or pg_terminate_backend ends every session of the host,
// and the pool hands out the ones that idled less than pgxpool's ping
// interval), the pool's sessions are dropped (pgxpool.Pool.Reset: the
// other idle ones most likely ended with it) and cl runs once more on a
// new session of the same host, before the replica path counts a failure
// of the host or tries another: a read on a replica changes nothing, and
// runs again safely. A host that is down fails that run's dial. Its
// outcome is what the runs learned (replicaRun), and whether it ran twice.
func (cn *conn) runOnReplica(ctx context.Context, h *host, at target, cl *call) (outcome, error) {
	o, err := cn.runOnReplicaOnce(ctx, h, at, cl)
	if err != nil && ctx.Err() == nil && sessionEnded(err) {
		h.pool.Reset()
		var again outcome
		again, err = cn.runOnReplicaOnce(ctx, h, at, cl)
		o = o.then(again)
		o.retried = true
	}
	return o, err
}

// sessionEnded reports whether err says the server had ended the session
// of a connection (not a dial's failure): its FATAL 57P01 admin_shutdown
// (pg_terminate_backend, a fast shutdown) or 57P02 crash_shutdown, or the
// connection found closed before anything was sent (driver.ErrBadConn),
// or closed under the statement.
func sessionEnded(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "57P01" || pe.Code == "57P02"
	}
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// replicaRun is what one run of a call on a replica learns on its way
// (runOnReplicaOnce), on that run's stack: the checks of the replica's
// position note their wait in it (noteCheck), a stale statement's runs
// again count in it (runAgain). The run returns it as its outcome.
type replicaRun struct {
	checkAge time.Duration // the age of the position checked (target.checkAge), for the host's catch-up record
	waited   time.Duration // how long its checks waited for the replica's replay
	reruns   int           // the runs after a stale statement (stale.go)
}

// runOnReplicaOnce borrows a connection from h's pool and runs cl on it: a
// statement, whose rows keep the connection until they are closed, or the
// BEGIN of a read-only transaction, which keeps it until its end.
func (cn *conn) runOnReplicaOnce(ctx context.Context, h *host, at target, cl *call) (outcome, error) {
	rr := replicaRun{checkAge: at.checkAge}
	var err error
	switch cl.kind {
	case callBegin:
		err = cn.beginOnReplica(ctx, h, at, cl, &rr)
	case callDescribe:
		err = cn.describeOnReplica(ctx, h, at, cl, &rr)
	default:
		err = cn.readOnReplica(ctx, h, at, cl, &rr)
	}
	return outcome{waited: rr.waited, reruns: rr.reruns}, err
}

// readOnReplica is runOnReplicaOnce for a statement, noting what it learns
// in rr.
func (cn *conn) readOnReplica(ctx context.Context, h *host, at target, cl *call, rr *replicaRun) error {
	s := cn.replicaSendOf(h, at.check, cl)
	b := s.b
	err := cn.borrow(ctx, h, b, at.check && !s.pipelined, at.wm, at.wait, cl, rr)
	if err != nil {
		s.rows.recycle()
		return err
	}
	for {
		err = cn.sendRead(ctx, h, &at, cl, &s, rr)
		if err == nil {
			if !cl.ex.holds(cl, b) {
				b.giveBack()
			}
			return nil
		}
		// A stale statement runs again on the same connection, the
		// one whose caches pgx and readChecked just cleaned (stale.go);
		// another connection of the pool may hold it too.
		if ctx.Err() == nil && !b.conn().IsClosed() && cn.runAgain(err, cl, rr.reruns) {
			rr.reruns++
			continue
		}
		if ctx.Err() == nil && !pgpipe.IsPgError(err) && !errors.Is(err, errNotCaughtUp) && !b.conn().IsClosed() {
			err = &clientError{err}
		}
		b.giveBack()
		s.rows.recycle()
		return err
	}
}

// replicaSend is how runOnReplica sends a statement to a replica: what
// goes in the read's round trip, and what holds the connection it
// borrows. It lives on runOnReplica's stack.
type replicaSend struct {
	pipelined bool         // the position check goes first in the read's round trip (readChecked)
	sawPiped  bool         // a causal read's bound (SawSQL) is read after it in the same round trip
	b         *borrowed    // the borrowed connection: in rows, checked, the pgx face's buffer, or alone
	rows      *replicaRows // a database/sql query's rows (replicaRowsPool), else nil
	checked   *checkedRows // a checked database/sql query's rows, else nil
}

// replicaSendOf returns how cl goes to h (check: the plan asks for the
// replica's position to be checked first): pipelined with the check when
// it may be, with a causal read's bound read after it when it may be, and
// the holder of the connection it will borrow (a zero borrowed).
func (cn *conn) replicaSendOf(h *host, check bool, cl *call) replicaSend {
	var s replicaSend
	s.pipelined = check && cn.c.pipelines(h, cl, pipeChecked)
	// Under causal consistency, the bound of what the read saw is read
	// after it in the same round trip (causal.go): with the check when
	// there is one, else after the read alone; a read that cannot be
	// sent so leaves it unknown.
	if cl.saw != nil {
		cl.saw.on(h, false)
		s.sawPiped = s.pipelined || (cl.single && cn.c.pipelines(h, cl, pipePositioned))
	}
	// A database/sql query's rows hold the borrowed connection, a pgx
	// Query's call does: one allocation for both.
	s.b, s.rows, s.checked = cl.ex.holder(cl, s.pipelined, s.sawPiped)
	return s
}

// sendRead runs cl once, as s says, on the connection s.b borrowed from
// h, checked against at's watermark when s is pipelined. On success cl
// holds the rows or the result; the error is the statement's, for
// runOnReplica to judge (run again, or give the connection back). Its
// check's wait is noted in rr.
func (cn *conn) sendRead(ctx context.Context, h *host, at *target, cl *call, s *replicaSend, rr *replicaRun) error {
	var err error
	b := s.b
	switch {
	case s.pipelined:
		err = cn.readChecked(ctx, b, at.wm, at.wait, cl, s.checked, rr)
	case s.sawPiped && cl.isQuery:
		err = cl.ex.readSaw(ctx, cn, b, cl)
	case s.sawPiped:
		// An Exec of a read (database/sql's, or the Pool's).
		err = cn.execSaw(ctx, b, cl)
	default:
		if err = cl.ex.readOn(ctx, cl, b, s.rows, cn.c.statementArgs(h, cl.args)); err == nil {
			cl.saw.recordUnknown(cl)
		}
	}
	return err
}

// execSaw runs cl, an Exec of a read (database/sql's, or the Pool's)
// under causal consistency, on b, a borrowed replica connection, with
// SawSQL after it in the same round trip (pgpipe.ExecRead), and records
// the bound it read. It returns driver.ErrBadConn when nothing was sent.
func (cn *conn) execSaw(ctx context.Context, b *borrowed, cl *call) error {
	h := b.h
	tag, pos, err := pgpipe.ExecRead(ctx, b.conn(), &h.descs, cn.c.stmtsOf(h, b.conn()), cl.query, cl.args)
	if err != nil {
		if pgconn.SafeToRetry(err) {
			return driver.ErrBadConn
		}
		return err
	}
	cl.ex.execResult(cl, tag)
	cl.saw.record(pos)
	return nil
}

// stdlibExec runs query, which returns no rows to the caller, on pc as
// stdlib's Conn.ExecContext does: driver.ErrBadConn when pc is closed or
// nothing was sent.
func stdlibExec(ctx context.Context, pc *pgx.Conn, query string, args []driver.NamedValue) (driver.Result, error) {
	if pc.IsClosed() {
		return nil, driver.ErrBadConn
	}
	a := make([]any, len(args))
	for i, v := range args {
		a[i] = v.Value
	}
	tag, err := pc.Exec(ctx, query, a...)
	if err != nil && pgconn.SafeToRetry(err) {
		return nil, driver.ErrBadConn
	}
	return driver.RowsAffected(tag.RowsAffected()), err
}

// clientError is a read that failed in the client, on a replica
// connection that is fine and without the server refusing it: an argument
// that cannot be encoded (pgx's or encode's), a value that cannot be
// decoded. Another host would fail the same way, and the host is not to
// blame: runOnReplicas returns the error at once, without a retry, a probe
// or a breaker failure.
type clientError struct{ err error }

func (e *clientError) Error() string { return e.err.Error() }
func (e *clientError) Unwrap() error { return e.err }

// replicaRetryable reports whether a read that failed on a replica before
// returning any row may run elsewhere: the connection failed or could not
// be had, the standby cancelled the read for a recovery conflict, or it is
// shutting down or starting up. A read has no effect, so running it again
// is harmless; what matters is that the caller saw nothing of it.
//
// Every code is judged by its SQLSTATE alone, never by the message, which
// is in the server's lc_messages language. A standby cancels a statement
// that conflicts with recovery (a snapshot, lock, buffer pin, tablespace or
// deadlock with the startup process; ProcessRecoveryConflictInterrupt in
// src/backend/tcop/postgres.c) with 40001 serialization_failure, "canceling
// statement due to conflict with recovery", or terminates the session with
// 40001, or with 57P04 database_dropped when the database it was connected
// to was dropped; PostgreSQL raises 57P04 for nothing else. A 40001 on a
// standby has no other source in PostgreSQL: it comes otherwise from
// serializable isolation, which a standby refuses (0A000 "cannot use
// serializable mode in a hot standby", in check_transaction_isolation and
// GetSerializableTransactionSnapshot), or from a repeatable-read
// transaction's write or row lock, which a standby cannot run; and this
// path runs only autocommit statements and the BEGIN of a read-only
// transaction. A user function that raises 40001 itself fails the same way
// on the next host, which returns that error: a retry costs time, never
// correctness. 40P01 deadlock_detected is not a recovery conflict (the
// startup process's deadlocks are reported as 40001) and is not retried.
func replicaRetryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "57P04": // recovery conflict, see above
			return true
		case "57P01", "57P02", "57P03":
			return true
		}
		return false
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// borrow takes a connection from h's pool into b, a zero borrowed: through
// stdlib for a transaction's BEGIN (see borrowed). With check, it first
// checks the replica's replay position on that connection (see
// checkReplica), waiting up to wait for it (noted in rr), and gives it
// back with errNotCaughtUp when the replica lacks wm. On error b was given
// back, or never held a connection.
func (cn *conn) borrow(ctx context.Context, h *host, b *borrowed, check bool, wm lagmeter.Watermark, wait time.Duration, cl *call, rr *replicaRun) error {
	if cl.kind == callBegin {
		dc, err := h.replicas.Connect(ctx)
		if err != nil {
			return err
		}
		b.sc = dc.(*stdlib.Conn)
	} else {
		pc, err := h.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		b.pc = pc
	}
	b.h = h
	h.flight.add(b)
	if err := cn.c.syncStatements(ctx, b.conn(), h, false); err != nil {
		b.giveBack()
		return err
	}
	if !h.breaker.Allow() {
		// The circuit opened after the pool answered: its release of the
		// host's reads may have missed this one.
		b.giveBack()
		return fmt.Errorf("pgrouted: %s: circuit open", dsn.Printable(h.Name))
	}
	if check {
		if err := cn.checkReplica(ctx, b, wm, wait, rr); err != nil {
			b.giveBack()
			return err
		}
	}
	return nil
}

// errNotCaughtUp: the replica's position check found it behind the
// caller's writes.
var errNotCaughtUp = pgpipe.ErrBehind

// checkReplica checks on b, alone, that the replica has replayed up to wm
// (waiting up to wait for it, noted in rr; pgpipe.Check), and returns
// errNotCaughtUp when it has not.
func (cn *conn) checkReplica(ctx context.Context, b *borrowed, wm lagmeter.Watermark, wait time.Duration, rr *replicaRun) error {
	hv := cn.c.view().of(b.h)
	if !hv.mayReach(wm) {
		return errNotCaughtUp
	}
	start := time.Now()
	replay, err := pgpipe.Check(ctx, b.conn().PgConn(), cn.c.stmtsOf(b.h, b.conn()), wm.LSN, wait)
	cn.noteCheck(b, hv, wm, wait, start, replay, err, rr)
	return err
}

// noteCheck records the answer of a check on b of the replica's replay
// position against wm (waiting up to wait), sent at sent in the run rr:
// the replay position it carries (replay, 0 for none) refreshes what is
// known of the host, the wait is the run's and the connector's, and its
// outcome err (nil: found; errNotCaughtUp: not found) is the host's
// catch-up record. hv is the view the check was planned in.
func (cn *conn) noteCheck(b *borrowed, hv *hostView, wm lagmeter.Watermark, wait time.Duration, sent time.Time, replay lagmeter.LSN, err error, rr *replicaRun) {
	if replay != 0 {
		b.h.noteReplay(hv.probe.Conn, replay)
	}
	rr.waited += cn.c.waited(b.h, hv.probe.Conn, wm, wait, sent, err)
	b.h.recordCheck(rr.checkAge, wait, sent, err)
}

// readChecked runs a read on a borrowed replica connection after checking,
// in the same round trip, that the replica has replayed up to wm: the check
// and the read go in one pipeline, in one implicit transaction, the check
// first; when the check fails the server skips the read and readChecked
// returns errNotCaughtUp (pgpipe.Checked). The rows are database/sql's
// (cr, which holds b, becomes cl.rows) or, for a pgx Query of the Pool,
// pgx's own over the read's result reader (pgx.RowsFromResultReader, in
// the result formats pgx asks for, with their first row read at once as
// pgxCall.on reads it): the face's (executor.checked, openChecked). On
// success the rows own b: closing them ends the pipeline and gives it
// back; on error b is still the caller's, to run the read again on or to
// give back.
//
// Under causal consistency (cl.saw), SawSQL follows the read in the same
// round trip, and closing the rows records its answer. The checks' wait
// is noted in rr.
func (cn *conn) readChecked(ctx context.Context, b *borrowed, wm lagmeter.Watermark, wait time.Duration, cl *call, cr *checkedRows, rr *replicaRun) error {
	hv := cn.c.view().of(b.h)
	if !hv.mayReach(wm) {
		return errNotCaughtUp
	}
	pc := b.conn()
	descs := &b.h.descs
	if descs.Get(cl.query) == nil {
		// The statement must be described first, and a replica that lacks
		// the caller's writes may fail to (a table the caller just
		// created): check it on its own this once.
		if err := cn.checkReplica(ctx, b, wm, wait, rr); err != nil {
			return err
		}
		wait = 0 // it holds wm now
	}
	c, pgxFormats := cl.ex.checked(pc, cl, cr)
	replay, sent, err := c.Start(ctx, pc, descs, cn.c.stmtsOf(b.h, pc), wm.LSN, wait, cl.query, cl.args, pgxFormats, cl.saw != nil)
	if err == nil || errors.Is(err, errNotCaughtUp) {
		cn.noteCheck(b, hv, wm, wait, sent, replay, err, rr)
	}
	if err == nil {
		err = c.Read()
	}
	if err != nil {
		return err
	}
	return cl.ex.openChecked(pc, c, cr, cl)
}

// beginOnReplica opens the read-only transaction of cl on a connection
// borrowed from h's pool, after the position check at asks for (noted in
// rr).
func (cn *conn) beginOnReplica(ctx context.Context, h *host, at target, cl *call, rr *replicaRun) error {
	b := new(borrowed)
	if err := cn.borrow(ctx, h, b, at.check, at.wm, at.wait, cl, rr); err != nil {
		return err
	}
	inner, err := cl.ex.begin(ctx, cl, b.sc)
	if err != nil {
		b.giveBack()
		return err
	}
	cn.tx = &tx{cn: cn, ctx: ctx, inner: inner, replica: b, host: h, begin: cl.begin}
	return nil
}

// describeOnReplica is the replica path of describe: cl.query described on
// a connection borrowed from h's pool, after the check at asks for (noted
// in rr).
func (cn *conn) describeOnReplica(ctx context.Context, h *host, at target, cl *call, rr *replicaRun) error {
	var b borrowed
	if err := cn.borrow(ctx, h, &b, at.check, at.wm, at.wait, cl, rr); err != nil {
		return err
	}
	defer b.giveBack()
	var err error
	cl.sd, err = prepareOn(ctx, b.conn(), cl.query, &h.descs)
	return err
}
