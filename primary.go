package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
)

// This file is the primary session: a connection's session on the current
// primary, opened when a statement first needs it and waiting up to
// pgrouted_write_timeout for a primary during a failover, and the waits
// for the topology to follow a primary that failed or refused a write.
// Running a statement on it is primaryrun.go.

// primaryConn returns the primary session, opening it on the current
// primary when needed and waiting up to pgrouted_write_timeout for one. A
// session belongs to the primary's term (term.go): once the term ended, it
// is closed, and a dial under it is abandoned (nothing was sent) for the
// next primary.
func (cn *conn) primaryConn(ctx context.Context, op string) (*stdlib.Conn, error) {
	cn.used()
	if cn.bad {
		return nil, driver.ErrBadConn
	}
	if cn.inSQLTx() {
		// A transaction opened with SQL: stay on its session whatever
		// happens; the server will tell.
		cn.c.prim.gotSession(0, false)
		return cn.primary, nil
	}
	var deadline time.Time // set by the first wait (waitPrimary) or dial: the write timeout from then
	var lastErr error
	var began time.Time // when it first had to open a session
	for {
		t, err := cn.c.waitPrimary(ctx, op, &deadline)
		if err != nil {
			return nil, withCause(err, lastErr)
		}
		if err := cn.dropOldSession(t); err != nil {
			return nil, err
		}
		if cn.primary != nil {
			if !cn.keepSession(ctx, began) {
				continue // the session failed: a new one, as above
			}
			return cn.primary, nil
		}
		if began.IsZero() {
			began = time.Now()
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(cn.c.cfg.WriteTimeout)
		}
		// A slot among the primary's sessions (pool_max_conns), or an
		// idle connection's session, within the same wait.
		took, err := cn.c.prim.acquire(ctx, cn, t, deadline)
		if err != nil {
			return nil, withCause(err, lastErr)
		}
		if took {
			continue // checked and used as its own, above
		}
		sc, err := cn.dialPrimary(ctx, t, began)
		if err == nil {
			return sc, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		lastErr = err
		if werr := cn.c.awaitNextPrimary(ctx, t, op, deadline); werr != nil {
			return nil, withCause(werr, lastErr)
		}
	}
}

// dropOldSession closes the primary session when it no longer belongs to t,
// the current primary's term: it was opened under an older term, or the
// server closed it. It returns driver.ErrBadConn (and marks the connection
// bad) when that lost a pinned connection's session state; else nil.
func (cn *conn) dropOldSession(t *term) error {
	if cn.primary != nil && (t != cn.term || cn.primary.Conn().IsClosed()) {
		cn.closePrimary()
		if cn.pinned {
			// The session state is gone with the old primary. Nothing
			// was sent: database/sql may retry on a new connection.
			cn.bad = true
			return driver.ErrBadConn
		}
	}
	return nil
}

// keepSession readies the primary session the connection holds for the
// statement (its prepared statements in step with the schema:
// syncStatements) and counts the statement's getting it: kept, or, when
// began is not zero, taken from an idle connection after a wait since
// began. It reports false when the session failed (syncStatements closed
// it): the caller drops it and opens another.
func (cn *conn) keepSession(ctx context.Context, began time.Time) bool {
	if err := cn.c.syncStatements(ctx, cn.primary.Conn(), cn.host, cn.pinned); err != nil {
		return false
	}
	if began.IsZero() {
		cn.c.prim.gotSession(0, false)
	} else {
		cn.c.prim.gotSession(time.Since(began), true)
	}
	return true
}

// dialPrimary opens a session on the host of term t, with the slot
// acquire gave, and makes it the connection's primary session when the
// server is not a hot standby and t still holds (term.join); began is when
// the statement first had to open one. It returns the session, or the
// error of the dial or of that check (the session is then closed and its
// slot given back).
func (cn *conn) dialPrimary(ctx context.Context, t *term, began time.Time) (*stdlib.Conn, error) {
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
			cn.c.syncStatements(ctx, sc.Conn(), h, cn.pinned) // new: nothing to drop
			cn.primary, cn.host, cn.epoch, cn.term = sc, h, t.epoch, t
			cn.c.prim.opened(cn, time.Since(began))
			return sc, nil
		default:
			err = errNotPrimary
		}
		sc.Close()
	}
	cn.c.prim.notOpened()
	return nil, err
}

// awaitNextPrimary waits, after a session could not be opened on the
// primary of term t, until it is worth trying again, within deadline: at
// once when t ended meanwhile; otherwise until the topology has news of
// the host (probed at once) or moved on, and a short pause after that. It
// returns nil to try again, or the wait's error (ctx's, or no primary by
// deadline).
func (c *Connector) awaitNextPrimary(ctx context.Context, t *term, op string, deadline time.Time) error {
	if t.ended() {
		// The topology moved on during the dial: the next primary,
		// or the wait for one.
		return nil
	}
	// The primary may be failing over: probe it at once and wait for
	// the topology to move, within the write timeout.
	h := t.host
	err := c.waitChange(ctx, h, t.epoch, c.probeNow(h), op, deadline)
	if err == nil {
		// Do not hammer a host that is down while its lease runs.
		err = sleepCtx(ctx, min(50*time.Millisecond, max(time.Until(deadline), 0)))
	}
	return err
}

// withCause attaches the last connection error to a RouteError.
func withCause(err, cause error) error {
	var re *RouteError
	if cause != nil && errors.As(err, &re) {
		re.cause = cause
	}
	return err
}

// closePrimary closes the primary session, if any, and gives back its slot
// among the primary's sessions.
func (cn *conn) closePrimary() {
	if cn.primary != nil {
		sc, t := cn.detachLocked() // not parked: the connection's own
		closeSession(sc, t)
		cn.c.prim.closed()
	}
	cn.term = nil
	cn.descs = nil
}

// termEndedErr is the one rule for a statement whose primary stopped being
// one under it: the error of op, sent on sc, a primary session opened
// under term t (sc nil: none, the statement ran elsewhere), that failed
// with err. When sc broke because t ended (term.go: the host stopped
// being the primary before it answered), the statement may have run
// there, and its outcome is unknown (outcomeUnknown); otherwise err stays
// as it is. Every site that ran something on a primary session goes
// through it: a statement (primaryFailed), a statement of a transaction,
// a COMMIT (tx.go), a write's results (resultErr).
func termEndedErr(op string, err error, t *term, sc *stdlib.Conn) error {
	if err == nil || sc == nil || t == nil || !t.ended() || !sc.Conn().IsClosed() {
		return err
	}
	return outcomeUnknown(op, err)
}

// outcomeUnknown is the error of a statement that was sent to a primary
// whose term ended before it answered, with the connection's error err:
// the statement may have run there, and is not run again
// (ErrOutcomeUnknown, reason primary-lost). err stays as it is when
// nothing was sent (driver.ErrBadConn: database/sql runs it again on a new
// connection).
func outcomeUnknown(op string, err error) error {
	if err == nil || errors.Is(err, driver.ErrBadConn) || errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return &RouteError{Op: op, Reason: ReasonPrimaryLost, cause: err}
}

// resultErr is the error of a write's results read after its statement
// returned (its rows, pgx's rows or batch results, the answer of its
// commit) from sc, a primary session opened under term t (nil: none):
// err, unless it is the connection's (not the server's, nor the rows'
// end) and t ended: then the write's outcome is unknown. It is the one
// rule for every face's results.
func resultErr(err error, t *term, sc *stdlib.Conn) error {
	if err == io.EOF || pgpipe.IsPgError(err) {
		return err
	}
	return termEndedErr(OpWrite, err, t, sc)
}

// descsOf returns the statement descriptions valid on the primary
// session: its host's, shared by every session in the default state, or,
// once the session changed its state (a SET search_path, say), its own.
func (cn *conn) descsOf() *pgpipe.Descs {
	if !cn.pinned {
		return &cn.host.descs
	}
	if cn.descs == nil {
		cn.descs = new(pgpipe.Descs)
	}
	return cn.descs
}

// waitPrimary returns the current primary's term, waiting until *deadline
// for one with a valid lease (a zero *deadline is set, when it first has to
// wait, to pgrouted_write_timeout from then: the calls of one statement
// share it). It wakes on each new topology snapshot.
func (c *Connector) waitPrimary(ctx context.Context, op string, deadline *time.Time) (*term, error) {
	var kicked time.Time
	for {
		changed := c.top.Changed()
		if t := c.liveTerm(); t != nil {
			return t, nil
		}
		now := time.Now()
		if deadline.IsZero() {
			*deadline = now.Add(c.cfg.WriteTimeout)
		}
		if !now.Before(*deadline) {
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
			until = *deadline
		}
		if err := awaitSnapshot(ctx, changed, until); err != nil {
			return nil, err
		}
	}
}

// probeNow asks for a probe of host h at once, and returns the time of its
// last probe before that one: waitChange's first. Read before the probe is
// asked for, since a probe that fails at once (on a connection the host's
// restart broke) may be recorded before the caller looks.
func (c *Connector) probeNow(h *host) (first time.Time) {
	first = c.view().of(h).probe.LastProbe
	c.top.ProbeNow(h.idx)
	return first
}

// waitChange waits until the snapshot has news of host h (a probe recorded
// after first, its last probe before the caller asked for one: probeNow)
// or no longer names it the primary of epoch, or until deadline.
func (c *Connector) waitChange(ctx context.Context, h *host, epoch uint64, first time.Time, op string, deadline time.Time) error {
	for {
		changed := c.top.Changed()
		v := c.view()
		if !v.isPrimary(h) || v.snap.Epoch != epoch || v.of(h).probe.LastProbe.After(first) {
			return nil
		}
		if !time.Now().Before(deadline) {
			return &RouteError{Op: op, Reason: ReasonNoPrimary}
		}
		if err := awaitSnapshot(ctx, changed, deadline); err != nil {
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
// reports no in_hot_standby at connect (see dialPrimary), and behind a
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
		if err := awaitSnapshot(ctx, changed, deadline); err != nil {
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
