package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// This file is the primary path's run of a statement on the primary
// session: the run itself, the WAL position read after a write's commit
// (pipelined with the write, internal/pgpipe; or deferred to the first
// read that needs it, consistency.DeferredUse), the bookkeeping that
// follows a write (raising the read-your-writes marks), and the rerun of an
// autocommit write that a demoted primary refused with SQLSTATE 25006.

// readOnly25006 reports a "read-only transaction" refusal: the statement
// had no effect.
func readOnly25006(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "25006"
}

// runOnPrimary runs a statement on the primary session, with the
// bookkeeping that follows a write: it runs it once more when nothing can
// have run (the session broke before, or a demoted primary refused it),
// and raises the read-your-writes watermark after it. Its outcome is where
// it ran, and whether it ran again.
func (cn *conn) runOnPrimary(ctx context.Context, p *plan, r *sqlclass.Result, cl *call) (o outcome, _ error) {
	for attempt := 0; ; attempt++ {
		sc, err := cn.primaryConn(ctx, p.op)
		if err != nil {
			return o, err
		}
		o.ran, o.primary = cn.host, true
		inTx := cn.inSQLTx()
		cn.pinBefore(p, r, cl)
		as := sendAs{primary: true, read: p.class == sqlclass.Read && !inTx && !cn.pinned}
		positioned, sawPiped := cn.pipelinedOnPrimary(&p.in, r, cl, inTx)
		// raises: the marks are raised after it (raiseAfterStatement),
		// unless it is a read or changes nothing but its session; writes:
		// and outside a transaction opened with SQL.
		raises := p.class != sqlclass.Read && !r.WritesNothing
		writes := raises && !inTx
		if raises {
			// What the marks raised after it will say they followed.
			as.sent = consistency.Now()
		}
		pos, unanswered, err := cn.execPrimary(ctx, &p.in, p.writes, sc, positioned, writes, cl, as)
		if endedUnanswered(r, cl, unanswered, err) && !inTx && !cn.pinned {
			// Nothing committed: as if it had not been sent.
			err = driver.ErrBadConn
		}
		if r.Has(sqlclass.Session) {
			// It may have deallocated prepared statements (DEALLOCATE,
			// DISCARD) or changed what names mean (SET search_path):
			// the pipelined paths prepare theirs again.
			pgpipe.InvalidateAll(sc.Conn().PgConn())
		}
		if err != nil {
			retry, stop, ferr := cn.primaryFailed(ctx, p, sc, err, inTx, attempt)
			if retry && cl.ex.once() {
				// Its input cannot be sent again (CopyFrom's source).
				retry, stop, ferr = false, true, err
			}
			if retry {
				o.retried = true
				continue
			}
			if stop {
				return o, ferr
			}
		}
		if raises && !cn.inSQLTx() {
			cn.raiseAfterStatement(ctx, &p.in, p.writes, positioned, pos, cl, as.sent, err)
		}
		sawOnPrimary(cl, sawPiped, pos, err)
		return o, err
	}
}

// pinBefore pins the connection to its primary session before cl runs
// there when the statement (r) changes session state or the plan p keeps
// the connection on the primary after it (p.pin), unless cl is a pgx call
// that leaves it unpinned (pgxCall.unpinned); a new pin that a function
// decided is counted.
func (cn *conn) pinBefore(p *plan, r *sqlclass.Result, cl *call) {
	if (r.Has(sqlclass.Session) || p.pin) && !cl.ex.unpinned() {
		// Pin before running: even a failed string may have changed
		// session state with its first statements.
		if !cn.pinned && (p.fn != "" || p.pin) {
			cn.c.counters.functionPins.Add(1)
		}
		cn.pin()
	}
}

// pipelinedOnPrimary reports how cl, classified r, with intent in, is
// sent on the primary session (inTx: inside a transaction opened with
// SQL): positioned, pipelined with the read of the WAL position after it
// (see positioned); sawPiped, a read under causal consistency whose bound
// is that position (then positioned too). It starts cl's causal record on
// the primary.
func (cn *conn) pipelinedOnPrimary(in *consistency.Intent, r *sqlclass.Result, cl *call, inTx bool) (positioned, sawPiped bool) {
	positioned = cn.positioned(in, r, cl)
	// A read under causal consistency reads the insert position after
	// it the same way: an upper bound of what it saw (causal.go). Not
	// inside a transaction opened with SQL, where a stale statement is
	// run as pgx runs it (txstale.go): its bound is left unknown.
	if cl.saw != nil {
		cl.saw.on(cn.host, true)
		sawPiped = !inTx && cl.single && cn.c.pipelines(cn.host, cl, pipePositioned)
		positioned = positioned || sawPiped
	}
	return positioned, sawPiped
}

// sawOnPrimary records, under causal consistency, the bound of what cl
// saw after it ran on the primary session with outcome err: pos, the
// position read after it when it was sent so (sawPiped), else unknown.
// A query's rows record it at their end, or when they are closed; a
// statement that failed records nothing here.
func sawOnPrimary(cl *call, sawPiped bool, pos lagmeter.LSN, err error) {
	switch {
	case cl.saw == nil || err != nil:
	case !sawPiped:
		cl.saw.recordUnknown(cl)
	case !cl.isQuery:
		cl.saw.record(pos)
		// A query's rows record it at their end.
	}
}

// execPrimary runs cl, with intent in, on the primary session sc as as
// says: pipelined with the read of the position after its commit when
// positioned (pos is then that position, or 0; for a query, it is read
// at the rows' end, or when they are closed). unanswered: it failed
// before the server
// answered it (executor.run).
func (cn *conn) execPrimary(ctx context.Context, in *consistency.Intent, ws sqlclass.Scope, sc *stdlib.Conn, positioned, writes bool, cl *call, as sendAs) (pos lagmeter.LSN, unanswered bool, err error) {
	switch {
	case !positioned && writes && cl.isQuery:
		// Rows that raise the marks once closed.
		unanswered, err = cl.ex.queryWrite(ctx, cn, *in, ws, sc, cl)
		return 0, unanswered, err
	case !positioned:
		unanswered, err = cl.ex.run(ctx, cl, sc, cn.c.statementArgs(cn.host, cl.args), as)
		return 0, unanswered, err
	}
	var tag pgconn.CommandTag
	switch {
	case sc.Conn().IsClosed():
		err = driver.ErrBadConn
	case cl.isQuery:
		// INSERT … RETURNING: the statement commits once its rows are all
		// sent; the position after it is read at their end.
		unanswered, err = cl.ex.queryPositioned(ctx, cn, *in, ws, sc, cl, as)
	default:
		if tag, pos, err = cn.execPositioned(ctx, sc, cl.query, cl.args); err == nil {
			cl.ex.execResult(cl, tag)
		}
		unanswered = err != nil && tag.String() == ""
	}
	if err != nil && pgconn.SafeToRetry(err) {
		err = driver.ErrBadConn
	}
	return pos, unanswered, err
}

// endedUnanswered reports whether err is the server ending the primary
// session (a FATAL error: a shutdown, pg_terminate_backend,
// idle_session_timeout) before it answered cl (unanswered), one INSERT, UPDATE, DELETE,
// MERGE or data-modifying WITH (r). The server sends whatever a statement
// produced before such an error, so none of it came: the statement did not
// complete, and, in autocommit, its implicit transaction ended without
// committing anything. For the caller (outside a transaction, on a
// session without state of its own) it is as if it had not been sent:
// primaryFailed runs it once more after the topology looked at the host,
// as it does for a statement that pgx could not send (pgconn.SafeToRetry).
// Whatever answered first (a row, a command tag) leaves the outcome
// unknown: the error stays.
func endedUnanswered(r *sqlclass.Result, cl *call, unanswered bool, err error) bool {
	if !unanswered || !r.DML || !cl.single || err == nil {
		return false
	}
	return fatal(err)
}

// fatal reports whether err is the server's FATAL or PANIC error. (Apart
// from endedUnanswered, which every primary statement calls: its error's
// variable, which errors.As takes the address of, lives on the heap.)
func fatal(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.SeverityUnlocalized == "FATAL" || pe.SeverityUnlocalized == "PANIC")
}

// primaryFailed handles the error of attempt on the primary session sc.
// retry: the statement may run again (nothing can have run, and the
// topology has moved). stop: the error is final (err is what to return),
// with its bookkeeping done. Neither: an ordinary error (the server refused
// the statement).
func (cn *conn) primaryFailed(ctx context.Context, p *plan, sc *stdlib.Conn, err error, inTx bool, attempt int) (retry, stop bool, _ error) {
	host, epoch := cn.host, cn.epoch
	switch {
	case sc.Conn().IsClosed():
		// The primary session broke. A read, or a statement that was
		// never sent (ErrBadConn), may run again once the topology has
		// looked at the host; a write that may have run may not. When
		// the host stopped being the primary before it answered (its
		// term ended), the error says the outcome is unknown.
		// A statement that stopped in the middle is nobody's fault but
		// the topology's: its outcome is unknown, whatever pgx said.
		err = termEndedErr(p.op, err, cn.term, sc)
		cn.closePrimary()
		first := cn.c.probeNow(host)
		if cn.pinned || inTx {
			cn.bad = true
			return false, true, err
		}
		if attempt == 0 && ctx.Err() == nil && (p.class == sqlclass.Read || errors.Is(err, driver.ErrBadConn)) {
			if cn.c.waitChange(ctx, host, epoch, first, p.op, time.Now().Add(cn.c.cfg.WriteTimeout)) == nil {
				return true, false, nil
			}
		}
		if errors.Is(err, driver.ErrBadConn) {
			cn.bad = true
		} else if p.class != sqlclass.Read {
			// The answer was lost: the write may have committed, at a
			// position nobody read.
			cn.c.raise(&p.in, p.writes, host, 0, time.Time{})
		}
		return false, true, err
	case readOnly25006(err) && p.class != sqlclass.Read:
		// The host we believed primary is a standby now. In autocommit
		// nothing ran: wait for the topology to follow, then retry once.
		cn.closePrimary()
		if cn.pinned || inTx || attempt > 0 {
			cn.c.top.ProbeNow(host.idx)
			cn.bad = true
			return false, true, err
		}
		if cn.c.waitDemoted(ctx, host, epoch, p.op, time.Now().Add(cn.c.cfg.WriteTimeout)) != nil {
			return false, true, err
		}
		return true, false, nil
	}
	return false, false, err
}

// raiseAfterStatement raises the read-your-writes marks after an
// autocommit statement, with intent in, that is not a read and wrote the
// relations ws, sent at sent (sendAs.sent), ran on the primary with
// outcome err.
func (cn *conn) raiseAfterStatement(ctx context.Context, in *consistency.Intent, ws sqlclass.Scope, positioned bool, pos lagmeter.LSN, cl *call, sent time.Time, err error) {
	switch {
	case positioned && cl.isQuery:
		// Raised when the rows are closed.
	case positioned:
		cn.c.raiseOutcome(in, ws, cn.host, pos, sent, err)
	case err == nil && cl.ex.raiseOnClose(ctx, cn, *in, ws, cl):
		// A statement returning rows (writeRows, pgx's rows or batch
		// results): it commits once its rows are all sent, and the session
		// is busy until they are closed; the marks are raised then.
	case in.Defers():
		// Committed (autocommit, or COMMIT), even after an error, since
		// part of a string may have run: its position is read when a
		// read needs it.
		cn.c.raiseDeferred(in, ws, cn.host)
	default:
		// Committed (autocommit, or COMMIT): raise the marks, even after
		// an error, since part of a string may have run.
		var pos lagmeter.LSN
		if cn.primary != nil {
			pos = cn.c.insertLSN(ctx, in, cn.primary.Conn())
		}
		cn.c.raise(in, ws, cn.host, pos, sent)
	}
}

// positioned reports whether a statement about to run on the primary session
// in autocommit mode can run pipelined with the read of the WAL position
// that follows its commit (see execPositioned): one INSERT, UPDATE, DELETE,
// MERGE or data-modifying WITH (not COPY, DDL, CALL or DO, which the
// ordinary path runs as pgx does), made with a Session (a write without
// one defers its position: consistency.Intent.Positioned), that may be
// pipelined (pipelines).
func (cn *conn) positioned(in *consistency.Intent, r *sqlclass.Result, cl *call) bool {
	if !r.DML || !in.Positioned() || cn.inSQLTx() {
		return false
	}
	return cn.c.pipelines(cn.host, cl, pipePositioned)
}

// execPositioned runs one statement on the primary session in autocommit
// mode and reads the WAL insert position after its commit, in one round
// trip (pgpipe.Exec). pos is 0 when the statement failed (nothing
// committed) or the position could not be read.
func (cn *conn) execPositioned(ctx context.Context, sc *stdlib.Conn, query string, args []driver.NamedValue) (tag pgconn.CommandTag, pos lagmeter.LSN, err error) {
	return pgpipe.Exec(ctx, sc.Conn(), cn.descsOf(), cn.c.stmtsOf(cn.host, sc.Conn()), query, args)
}

// queryPositioned is execPositioned for a statement that returns rows
// (INSERT … RETURNING): its rows stream to the caller, and at their end
// (or once they are closed) the commit's outcome and the position after
// it are read from the same pipeline and handed to done (see
// Connector.wroteAfter); a commit that failed fails the rows' last Next.
// The term may end while the rows or the commit's answer are on their
// way: the write may have committed, and the error says so (resultErr).
func (cn *conn) queryPositioned(ctx context.Context, sc *stdlib.Conn, query string, args []driver.NamedValue, done func(lagmeter.LSN, error)) (driver.Rows, error) {
	errFn := func(err error) error { return resultErr(err, cn.term, sc) }
	return pgpipe.Query(ctx, sc.Conn(), cn.descsOf(), cn.c.stmtsOf(cn.host, sc.Conn()), query, args, errFn, done)
}

// positionedRows is what pgx's rows of a positioned write
// (pgxCall.queryPositioned) do once closed: read the position after the
// commit and raise the marks to it.
type positionedRows struct {
	p    pgpipe.Pending
	cn   *conn
	term *term // the session's, when the statement ran: cn's may have moved on by the time the rows are read
	sc   *stdlib.Conn
	in   consistency.Intent // a copy: the plan is on its caller's stack
	ws   sqlclass.Scope     // the relations it wrote
	host *host
	sent time.Time
	saw  *sawBy // a read under causal consistency: the position is its bound (causal.go)
}

// finish reads the position after the statement, whose rows are closed,
// raises the marks, and returns the statement's outcome.
func (w *positionedRows) finish() error {
	// The reader's own error, not a Scan's: the statement's outcome.
	_, rerr := w.p.RR.Close()
	pos, sent, err := w.p.Finish(rerr)
	if !sent {
		return err
	}
	err = resultErr(err, w.term, w.sc)
	if w.saw != nil {
		w.saw.sawOutcome(pos, true, err)
		if rerr == nil {
			// A read whose rows came whole: what failed after them (the
			// bound's read, the session's end) is not the read's
			// (pgpipe.QueryRead).
			return nil
		}
		return err
	}
	w.cn.c.raiseOutcome(&w.in, w.ws, w.host, pos, w.sent, err)
	return err
}

// commitPositioned commits the primary session's transaction and reads the
// WAL position after the commit in the same round trip (pgpipe.Commit:
// pgx's Tx.Commit, pipelined with the position read).
func (cn *conn) commitPositioned(ctx context.Context) (lagmeter.LSN, error) {
	return pgpipe.Commit(ctx, cn.primary.Conn(), cn.descsOf(), cn.c.stmtsOf(cn.host, cn.primary.Conn()))
}
