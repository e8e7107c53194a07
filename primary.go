package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// This file is the primary path: the connection's primary session (opened
// on the current primary, waiting for one during a failover), a statement
// run on it, the WAL position read after a write's commit (pipelined with
// the write), and the rerun of an autocommit write that a demoted primary
// refused with SQLSTATE 25006.

// primaryConn returns the primary session, opening it on the current
// primary when needed and waiting up to pgrouted_write_timeout for one. A
// session belongs to the primary's term (term.go): once the term ended, it
// is closed, and a dial under it is abandoned (nothing was sent) for the
// next primary.
func (cn *conn) primaryConn(ctx context.Context, op string) (*stdlib.Conn, error) {
	if cn.bad {
		return nil, driver.ErrBadConn
	}
	if cn.inSQLTx() {
		// A transaction opened with SQL: stay on its session whatever
		// happens; the server will tell.
		return cn.primary, nil
	}
	deadline := time.Now().Add(cn.c.cfg.WriteTimeout)
	var lastErr error
	for {
		t, err := cn.c.waitPrimary(ctx, op, deadline)
		if err != nil {
			return nil, withCause(err, lastErr)
		}
		if cn.primary != nil && (t != cn.term || cn.primary.Conn().IsClosed()) {
			cn.closePrimary()
			if cn.pinned {
				// The session state is gone with the old primary. Nothing
				// was sent: database/sql may retry on a new connection.
				cn.bad = true
				return nil, driver.ErrBadConn
			}
		}
		if cn.primary != nil {
			if err := cn.c.syncStatements(ctx, cn.primary, cn.host, cn.pinned); err != nil {
				// The session failed: a new one, as above.
				continue
			}
			return cn.primary, nil
		}
		h := t.host
		dctx, release := t.dialContext(ctx)
		dc, err := h.sessions.Connect(dctx)
		release()
		if err == nil {
			sc := dc.(*stdlib.Conn)
			// PostgreSQL 14+ reports in_hot_standby at connect: a standby
			// is not the primary, whatever the last probe said. Not
			// behind a pooler: PgBouncer hands every client the
			// parameters the server reported to its first server
			// connection, and a promotion does not change them (a
			// standby promoted behind its pooler still says "on"). There
			// the probes decide, and a demoted primary's 25006 refusal
			// is the safety net, as on PostgreSQL before 14.
			switch {
			case sc.Conn().PgConn().ParameterStatus("in_hot_standby") == "on" && !cn.c.behindPooler(h):
				err = errors.New("pgrouted: " + h.Name + " is a hot standby (in_hot_standby=on)")
			case t.join(sc):
				cn.c.syncStatements(ctx, sc, h, cn.pinned) // new: nothing to drop
				cn.primary, cn.host, cn.epoch, cn.term = sc, h, t.epoch, t
				return sc, nil
			default:
				err = errNotPrimary
			}
			sc.Close()
		}
		if ctx.Err() != nil {
			return nil, err
		}
		lastErr = err
		if t.ended() {
			// The topology moved on during the dial: the next primary,
			// or the wait for one.
			continue
		}
		// The primary may be failing over: probe it at once and wait for
		// the topology to move, within the write timeout.
		cn.c.top.ProbeNow(h.idx)
		werr := cn.c.waitChange(ctx, h, t.epoch, op, deadline)
		if werr == nil {
			// Do not hammer a host that is down while its lease runs.
			werr = sleepCtx(ctx, min(50*time.Millisecond, max(time.Until(deadline), 0)))
		}
		if werr != nil {
			return nil, withCause(werr, lastErr)
		}
	}
}

// withCause attaches the last connection error to a RouteError.
func withCause(err, cause error) error {
	var re *RouteError
	if cause != nil && errors.As(err, &re) {
		re.cause = cause
	}
	return err
}

func (cn *conn) closePrimary() {
	if cn.primary != nil {
		if cn.term != nil {
			cn.term.leave(cn.primary)
		}
		cn.primary.Close()
		cn.primary = nil
	}
	cn.term = nil
	cn.descs = nil
}

// lost reports whether the primary session sc broke because its term ended
// (term.go): the host stopped being the primary while a statement ran.
func (cn *conn) lost(sc *stdlib.Conn) bool {
	return cn.term != nil && cn.term.ended() && sc.Conn().IsClosed()
}

// lostError is the error of a statement that was sent to a primary whose
// term ended before it answered, with the connection's error err: the
// statement may have run there, and is not run again. err stays as it is
// when nothing was sent (driver.ErrBadConn: database/sql runs it again on
// a new connection).
func lostError(op string, err error) error {
	if err == nil || errors.Is(err, driver.ErrBadConn) || errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return &RouteError{Op: op, Reason: ReasonPrimaryLost, cause: err}
}

// descsOf returns the statement descriptions valid on the primary
// session: its host's, shared by every session in the default state, or,
// once the session changed its state (a SET search_path, say), its own.
func (cn *conn) descsOf() *descCache {
	if !cn.pinned {
		return &cn.host.descs
	}
	if cn.descs == nil {
		cn.descs = new(descCache)
	}
	return cn.descs
}

// waitPrimary returns the current primary's term, waiting until deadline
// for one with a valid lease. It wakes on each new topology snapshot.
func (c *Connector) waitPrimary(ctx context.Context, op string, deadline time.Time) (*term, error) {
	var kicked time.Time
	for {
		changed := c.top.Changed()
		if t := c.liveTerm(); t != nil {
			return t, nil
		}
		now := time.Now()
		if !now.Before(deadline) {
			return nil, &RouteError{Op: op, Reason: ReasonNoPrimary}
		}
		const rekick = 200 * time.Millisecond
		if now.Sub(kicked) >= rekick {
			// A statement is waiting for a primary: probe every host now,
			// whatever backoff their circuits are in, so that one that
			// came back (or was promoted) is seen at once; again after
			// rekick if none was.
			kicked = now
			for _, h := range c.view().hosts {
				c.top.ProbeNow(h.idx)
			}
			// And the topology provider, if any: a new leader is
			// seen as soon as both agree.
			c.top.AskProvider()
		}
		until := kicked.Add(rekick)
		if deadline.Before(until) {
			until = deadline
		}
		if err := c.awaitSnapshot(ctx, changed, until); err != nil {
			return nil, err
		}
	}
}

// waitChange waits until the snapshot has news of host h (a probe sent
// after now) or no longer names it the primary of epoch, or until deadline.
func (c *Connector) waitChange(ctx context.Context, h *host, epoch uint64, op string, deadline time.Time) error {
	first := c.view().of(h).probe.LastProbe
	for {
		changed := c.top.Changed()
		v := c.view()
		if !v.isPrimary(h) || v.snap.Epoch != epoch || v.of(h).probe.LastProbe.After(first) {
			return nil
		}
		if !time.Now().Before(deadline) {
			return &RouteError{Op: op, Reason: ReasonNoPrimary}
		}
		if err := c.awaitSnapshot(ctx, changed, deadline); err != nil {
			return err
		}
	}
}

// waitDemoted waits, after host h, the primary of epoch, refused an
// autocommit write with SQLSTATE 25006, for a probe sent after the refusal
// to tell what the host is. It returns nil once the topology no longer
// names the host primary of epoch (it was demoted: the write may run on
// the next primary), and an error when such a probe found it the primary
// still (the server itself refuses writes: default_transaction_read_only)
// or when deadline passes. It probes the host at once, and again after
// each probe that failed: the first one after a demotion often does, on
// the probe connection that the host's restart broke, so a new probe alone
// is not an answer (as it is for waitChange). Before PostgreSQL 14, which
// reports no in_hot_standby at connect (see primaryConn), and behind a
// pooler, this is how a write that reached a demoted primary finds the new
// one.
func (c *Connector) waitDemoted(ctx context.Context, h *host, epoch uint64, op string, deadline time.Time) error {
	since := time.Now()
	var seen time.Time // the last probe of the host that was kicked for
	for first := true; ; first = false {
		changed := c.top.Changed()
		v := c.view()
		st := v.of(h).probe
		switch {
		case !v.isPrimary(h) || v.snap.Epoch != epoch:
			return nil
		case st.LastSuccess.After(since):
			return errStillPrimary
		case !time.Now().Before(deadline):
			return &RouteError{Op: op, Reason: ReasonNoPrimary}
		}
		if first || st.LastProbe.After(seen) {
			if !first {
				// That probe failed: do not hammer the host.
				if err := sleepCtx(ctx, min(50*time.Millisecond, max(time.Until(deadline), 0))); err != nil {
					return err
				}
			}
			seen = st.LastProbe
			c.top.ProbeNow(h.idx)
		}
		if err := c.awaitSnapshot(ctx, changed, deadline); err != nil {
			return err
		}
	}
}

// errStillPrimary: a host that refused a write with SQLSTATE 25006 is the
// primary still (waitDemoted).
var errStillPrimary = errors.New("pgrouted: the primary refuses writes")

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// readOnly25006 reports a "read-only transaction" refusal: the statement
// had no effect.
func readOnly25006(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "25006"
}

// runOnPrimary runs a statement on the primary session, with the
// bookkeeping that follows a write: it runs it once more when nothing can
// have run (the session broke before, or a demoted primary refused it),
// and raises the read-your-writes watermark after it.
func (cn *conn) runOnPrimary(ctx context.Context, p *plan, r sqlclass.Result, cl *call) error {
	for attempt := 0; ; attempt++ {
		sc, err := cn.primaryConn(ctx, p.op)
		if err != nil {
			return err
		}
		cl.ran, cl.primary = cn.host, true
		inTx := cn.inSQLTx()
		if (r.Has(sqlclass.Session) || p.pin) && !cl.px.unpinned() {
			// Pin before running: even a failed string may have changed
			// session state with its first statements.
			if !cn.pinned && (p.fn != "" || p.pin) {
				cn.c.counters.functionPins.Add(1)
			}
			cn.pin()
		}
		positioned := cn.positioned(ctx, r, cl)
		cl.sent = monoNow()
		pos, err := cn.execPrimary(ctx, sc, positioned, cl)
		if err != nil {
			retry, stop, ferr := cn.primaryFailed(ctx, p, sc, err, inTx, attempt)
			if retry && cl.px.once() {
				// Its input cannot be sent again (CopyFrom's source).
				retry, stop, ferr = false, true, err
			}
			if retry {
				cl.retried = true
				continue
			}
			if stop {
				return ferr
			}
		}
		if p.class != sqlclass.Read && !cn.inSQLTx() {
			cn.raiseAfter(ctx, positioned, pos, cl, err)
		}
		return err
	}
}

// execPrimary runs cl on the primary session sc: pipelined with the read
// of the position after its commit when positioned (pos is then that
// position, or 0; for a query, it is read when the rows are closed).
func (cn *conn) execPrimary(ctx context.Context, sc *stdlib.Conn, positioned bool, cl *call) (pos lagmeter.LSN, err error) {
	if !positioned {
		return 0, cl.on(ctx, sc, cn.c.statementArgs(cn.host, cl.args))
	}
	var tag pgconn.CommandTag
	switch {
	case sc.Conn().IsClosed():
		err = driver.ErrBadConn
	case cl.isQuery:
		// INSERT … RETURNING: the statement commits once its rows are all
		// sent; the position after it is read when they are closed.
		host := cn.host
		cl.rows, err = cn.queryPositioned(ctx, sc, cl.query, cl.args, func(pos lagmeter.LSN, werr error) {
			cn.c.wroteAfter(ctx, host, pos, cl.sent, werr)
		})
	default:
		if tag, pos, err = cn.execPositioned(ctx, sc, cl.query, cl.args); err == nil {
			cl.res = driver.RowsAffected(tag.RowsAffected())
			cl.px.setTag(tag)
		}
	}
	if err != nil && pgconn.SafeToRetry(err) {
		err = driver.ErrBadConn
	}
	return pos, err
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
		lost := cn.lost(sc)
		cn.closePrimary()
		cn.c.top.ProbeNow(host.idx)
		if lost {
			// A statement that stopped in the middle is nobody's fault
			// but the topology's: the lost error, whatever pgx said.
			err = lostError(p.op, err)
		}
		if cn.pinned || inTx {
			cn.bad = true
			return false, true, err
		}
		if attempt == 0 && ctx.Err() == nil && (p.class == sqlclass.Read || errors.Is(err, driver.ErrBadConn)) {
			if cn.c.waitChange(ctx, host, epoch, p.op, time.Now().Add(cn.c.cfg.WriteTimeout)) == nil {
				return true, false, nil
			}
		}
		if errors.Is(err, driver.ErrBadConn) {
			cn.bad = true
		} else if p.class != sqlclass.Read {
			// The answer was lost: the write may have committed, at a
			// position nobody read.
			cn.c.wrote(ctx, host, 0, time.Time{})
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

// raiseAfter raises the read-your-writes watermark after an autocommit
// statement that is not a read ran on the primary with outcome err.
func (cn *conn) raiseAfter(ctx context.Context, positioned bool, pos lagmeter.LSN, cl *call, err error) {
	switch {
	case positioned && cl.isQuery:
		// Raised when the rows are closed.
	case positioned:
		cn.c.wroteAfter(ctx, cn.host, pos, cl.sent, err)
	case err == nil && cl.px.wroteLater(ctx, cn):
		// pgx's rows or batch results: the same, when they are closed.
	case err == nil && cl.rows != nil:
		// A statement returning rows: it commits once its rows are all
		// sent, and the session is busy until they are closed; raise the
		// watermark then.
		cl.rows = &wroteRows{Rows: cl.rows.(*stdlib.Rows), cn: cn, sc: cn.primary, ctx: ctx, host: cn.host}
	default:
		// Committed (autocommit, or COMMIT): raise the watermark, even
		// after an error, since part of a string may have run.
		var pos lagmeter.LSN
		if cn.primary != nil {
			pos = cn.c.insertLSN(ctx, cn.primary.Conn())
		}
		cn.c.wrote(ctx, cn.host, pos, cl.sent)
	}
}

// positioned reports whether a statement about to run on the primary session
// in autocommit mode can run pipelined with the read of the WAL position
// that follows its commit (see execPositioned): one INSERT, UPDATE, DELETE,
// MERGE or data-modifying WITH (not COPY, DDL, CALL or DO, which the
// ordinary path runs as pgx does), under session consistency, with pgx's
// default extended-protocol modes and no pgx option among its arguments.
func (cn *conn) positioned(ctx context.Context, r sqlclass.Result, cl *call) bool {
	if !r.DML || !cn.c.tracksWrites(ctx) || cn.inSQLTx() || !cl.px.positionable() {
		return false
	}
	return cn.c.pipelineOK(cn.host, cl.args)
}

// execPositioned runs one statement on the primary session in autocommit
// mode and reads the WAL insert position after its commit, in one round
// trip: a pipeline of the statement, a Sync (which commits its implicit
// transaction), the position query and a second Sync.
//
// pos is 0 when the statement failed (nothing committed) or the position
// could not be read.
func (cn *conn) execPositioned(ctx context.Context, sc *stdlib.Conn, query string, args []driver.NamedValue) (tag pgconn.CommandTag, pos lagmeter.LSN, err error) {
	pc := sc.Conn()
	descs := cn.descsOf()
	e, err := encode(ctx, pc, descs, query, args, false)
	if err != nil {
		return tag, 0, err
	}
	pl, err := startPositioned(ctx, pc, &e)
	if err != nil {
		return tag, 0, err
	}
	tag, err = pipelinedResult(pl, nil)
	pos, err = finishPositioned(pl, err)
	if isPgError(err) {
		// The statement may no longer match its description (a column
		// changed type): describe it again next time.
		descs.drop(query)
	}
	return tag, pos, err
}

// startPositioned sends e and the position query, each followed by a Sync,
// in a pipeline on pc.
func startPositioned(ctx context.Context, pc *pgx.Conn, e *encoded) (*pgconn.Pipeline, error) {
	pl := pc.PgConn().StartPipeline(ctx)
	e.send(pl)
	pl.SendPipelineSync()
	pl.SendQueryParams(insertPositionSQL, nil, nil, nil, nil)
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		pl.Close()
		return nil, err
	}
	return pl, nil
}

// finishPositioned reads the position query and its Sync after a statement
// whose outcome was err, and ends the pipeline. pos is 0 when err is not
// nil, and when the position could not be read.
//
// err nil means the server answered the statement's Sync: it committed.
// A position query that fails after that (the connection broke, or the
// primary's term ended and closed it) does not make the statement fail:
// it succeeded, at a position nobody read (pos 0: the caller's watermark
// becomes unknown, see Connector.wrote). The broken connection is found
// closed at its next use.
func finishPositioned(pl *pgconn.Pipeline, err error) (lagmeter.LSN, error) {
	var text string
	if err == nil || isPgError(err) {
		if _, perr := pipelinedResult(pl, &text); perr != nil {
			text = ""
		}
	}
	pl.Close()
	if err != nil {
		return 0, err
	}
	pos, _ := lagmeter.ParseLSN(text)
	return pos, nil
}

// queryPositioned is execPositioned for a statement that returns rows
// (INSERT … RETURNING): its rows stream to the caller, and once they are
// closed the position after the commit is read from the same pipeline and
// handed to done with the statement's outcome (see Connector.wroteAfter).
func (cn *conn) queryPositioned(ctx context.Context, sc *stdlib.Conn, query string, args []driver.NamedValue, done func(lagmeter.LSN, error)) (driver.Rows, error) {
	pc := sc.Conn()
	descs := cn.descsOf()
	e, err := encode(ctx, pc, descs, query, args, true)
	if err != nil {
		return nil, err
	}
	pl, err := startPositioned(ctx, pc, &e)
	if err != nil {
		return nil, err
	}
	rr, err := nextResult(pl)
	if err != nil {
		if isPgError(err) {
			descs.drop(query)
		}
		if serr := finishSync(pl, err); serr != nil {
			err = serr
		}
		finishPositioned(pl, err)
		return nil, err
	}
	// The term may end while the rows or the commit's answer are on their
	// way: the write may have committed, and the error says so.
	lostErr := func(err error) error {
		if err != nil && !isPgError(err) && cn.lost(sc) {
			return lostError(OpWrite, err)
		}
		return err
	}
	rows, err := newResultRows(pc.TypeMap(), rr, func(rerr error) error {
		if serr := finishSync(pl, rerr); serr != nil && rerr == nil {
			rerr = serr
		}
		pos, perr := finishPositioned(pl, rerr)
		if rerr == nil && perr != nil {
			rerr = perr
		}
		if isPgError(rerr) {
			descs.drop(query)
		}
		rerr = lostErr(rerr)
		done(pos, rerr)
		return rerr
	})
	if err == nil {
		rows.(*resultRows).nextErr = lostErr
	}
	return rows, err
}

// commitPositioned commits the primary session's transaction and reads the
// WAL position after the commit in the same round trip. It mirrors pgx's
// Tx.Commit: a transaction the server had to roll back gives
// pgx.ErrTxCommitRollback, and a session left inside a transaction after an
// error is closed.
func (cn *conn) commitPositioned(ctx context.Context) (lagmeter.LSN, error) {
	sc := cn.primary
	tag, pos, err := cn.execPositioned(ctx, sc, "COMMIT", nil)
	if err != nil {
		if sc.Conn().PgConn().TxStatus() != 'I' {
			_ = sc.Conn().Close(ctx)
		}
		return 0, err
	}
	if tag.String() == "ROLLBACK" {
		return 0, pgx.ErrTxCommitRollback
	}
	return pos, nil
}
