package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/circuit"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// conn is one database/sql connection: a primary session, opened when a
// statement first needs the primary, plus replica connections borrowed from
// the connector's pools for each read. database/sql uses it from one
// goroutine at a time.
type conn struct {
	c *Connector

	primary *stdlib.Conn // nil until needed
	host    int          // the primary session's host
	epoch   uint64       // the topology epoch the primary session belongs to

	// pinned is set once a statement changed session state: from then on
	// everything runs on the primary session.
	pinned bool
	tx     *tx  // the open database/sql transaction, if any
	bad    bool // the connection must be discarded

	ownsConnector bool // opened by Driver.Open: Close closes the Connector
}

// primaryConn returns the primary session, opening it on the current
// primary when needed and waiting up to pgrouted_write_timeout for one.
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
		idx, epoch, err := cn.c.waitPrimary(ctx, op, deadline)
		if err != nil {
			var re *RouteError
			if errors.As(err, &re) && lastErr != nil {
				re.cause = lastErr
			}
			return nil, err
		}
		if cn.primary != nil && (epoch != cn.epoch || cn.primary.Conn().IsClosed()) {
			cn.closePrimary()
			if cn.pinned {
				// The session state is gone with the old primary. Nothing
				// was sent: database/sql may retry on a new connection.
				cn.bad = true
				return nil, driver.ErrBadConn
			}
		}
		if cn.primary != nil {
			return cn.primary, nil
		}
		dc, err := cn.c.primary[idx].Connect(ctx)
		if err == nil {
			sc := dc.(*stdlib.Conn)
			// PostgreSQL 14+ reports in_hot_standby at connect: a standby
			// is not the primary, whatever the last probe said.
			if sc.Conn().PgConn().ParameterStatus("in_hot_standby") != "on" {
				cn.primary, cn.host, cn.epoch = sc, idx, epoch
				return sc, nil
			}
			sc.Close()
			err = errors.New("pgrouted: " + cn.c.hosts[idx].Name + " is a hot standby (in_hot_standby=on)")
		}
		if ctx.Err() != nil {
			return nil, err
		}
		// The primary may be failing over: probe it at once and wait for
		// the topology to move, within the write timeout.
		lastErr = err
		cn.c.top.ProbeNow(idx)
		werr := cn.c.waitChange(ctx, idx, epoch, op, deadline)
		if werr == nil {
			// Do not hammer a host that is down while its lease runs.
			werr = sleepCtx(ctx, min(50*time.Millisecond, max(time.Until(deadline), 0)))
		}
		if werr != nil {
			var re *RouteError
			if errors.As(werr, &re) {
				re.cause = lastErr
			}
			return nil, werr
		}
	}
}

func (cn *conn) closePrimary() {
	if cn.primary != nil {
		cn.primary.Close()
		cn.primary = nil
	}
}

// readOnly25006 reports a "read-only transaction" refusal: the statement
// had no effect.
func readOnly25006(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "25006"
}

// replicaRetryable reports whether a read that failed on a replica before
// returning any row may run elsewhere: the connection failed or could not
// be had, the standby cancelled the read for a recovery conflict, or it is
// shutting down or starting up. A read has no effect, so running it again
// is harmless; what matters is that the caller saw nothing of it.
func replicaRetryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01":
			return strings.Contains(pe.Message, "conflict with recovery")
		case "57P01", "57P02", "57P03":
			return true
		}
		return false
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// call is one statement to run: a query or an exec, and its outcome.
type call struct {
	query   string
	args    []driver.NamedValue
	isQuery bool
	single  bool // one statement (see sqlclass.Result.Statements)
	rows    driver.Rows
	res     driver.Result
}

func (cl *call) on(ctx context.Context, sc *stdlib.Conn) error {
	var err error
	if cl.isQuery {
		cl.rows, err = sc.QueryContext(ctx, cl.query, cl.args)
	} else {
		cl.res, err = sc.ExecContext(ctx, cl.query, cl.args)
	}
	return err
}

// ExecContext implements driver.ExecerContext.
func (cn *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	cl := call{query: query, args: args}
	err := cn.run(ctx, &cl)
	return cl.res, err
}

// QueryContext implements driver.QueryerContext. Rows stream from the
// server; a replica connection goes back to its pool when they are closed.
func (cn *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cl := call{query: query, args: args, isQuery: true}
	err := cn.run(ctx, &cl)
	return cl.rows, err
}

// inSQLTx reports whether the primary session is inside a transaction that
// was opened with SQL (BEGIN) rather than with BeginTx.
func (cn *conn) inSQLTx() bool {
	return cn.primary != nil && cn.primary.Conn().PgConn().TxStatus() != 'I'
}

// run routes one statement and runs it.
func (cn *conn) run(ctx context.Context, cl *call) error {
	if cn.bad {
		return driver.ErrBadConn
	}
	began := time.Now()
	r := sqlclass.Classify(cl.query)
	cl.single = r.Statements == 1
	if cn.tx != nil {
		return cn.tx.run(ctx, r, cl, began)
	}
	p := cn.c.plan(ctx, r, cn.pinned || cn.inSQLTx(), true)
	ev := RouteEvent{Decision: Decision{Op: p.op, Reason: p.reason}, Query: cl.query, WriteLost: p.lost}
	defer func() {
		ev.Duration = time.Since(began)
		cn.c.report(ev)
	}()
	if p.err != nil {
		ev.Err = p.err
		return p.err
	}
	if !p.primary {
		err := cn.runOnReplicas(ctx, &p, &ev, cl)
		if err == nil || !ev.Primary {
			ev.Err = err
			return err
		}
		// The replicas failed or refused: the primary runs it (ev says why).
	}
	err := cn.runOnPrimary(ctx, &p, r, &ev, cl)
	ev.Err = err
	return err
}

// runOnPrimary runs a statement on the primary session, with the
// bookkeeping that follows a write.
func (cn *conn) runOnPrimary(ctx context.Context, p *plan, r sqlclass.Result, ev *RouteEvent, cl *call) error {
	for attempt := 0; ; attempt++ {
		sc, err := cn.primaryConn(ctx, p.op)
		if err != nil {
			return err
		}
		ev.Primary, ev.Endpoint = true, cn.c.hosts[cn.host].Name
		inTx := cn.inSQLTx()
		if r.Has(sqlclass.Session) {
			// Pin before running: even a failed string may have changed
			// session state with its first statements.
			cn.pinned = true
		}
		// An autocommit write that can be pipelined with the read of the
		// position after its commit costs one round trip.
		positioned, pos := cn.positioned(r, cl), lagmeter.LSN(0)
		if positioned {
			var tag pgconn.CommandTag
			switch {
			case sc.Conn().IsClosed():
				err = driver.ErrBadConn
			case cl.isQuery:
				// INSERT … RETURNING: the statement commits once its rows
				// are all sent; the position after it is read when they
				// are closed.
				host := cn.host
				cl.rows, err = cn.queryPositioned(ctx, sc, cl.query, cl.args, func(pos lagmeter.LSN, werr error) {
					cn.c.wroteAfter(ctx, host, pos, werr)
				})
			default:
				if tag, pos, err = cn.execPositioned(ctx, sc, cl.query, cl.args); err == nil {
					cl.res = driver.RowsAffected(tag.RowsAffected())
				}
			}
			if err != nil && pgconn.SafeToRetry(err) {
				err = driver.ErrBadConn
			}
		} else {
			err = cl.on(ctx, sc)
		}
		if err != nil && sc.Conn().IsClosed() {
			// The primary session broke. A read, or a statement that was
			// never sent (ErrBadConn), may run again once the topology has
			// looked at the host; a write that may have run may not.
			host, epoch := cn.host, cn.epoch
			cn.closePrimary()
			cn.c.top.ProbeNow(host)
			if cn.pinned || inTx {
				cn.bad = true
				return err
			}
			if attempt == 0 && ctx.Err() == nil && (p.class == sqlclass.Read || errors.Is(err, driver.ErrBadConn)) {
				if werr := cn.c.waitChange(ctx, host, epoch, p.op, time.Now().Add(cn.c.cfg.WriteTimeout)); werr == nil {
					ev.Retried = true
					continue
				}
			}
			if errors.Is(err, driver.ErrBadConn) {
				cn.bad = true
			} else if p.class != sqlclass.Read {
				// The answer was lost: the write may have committed, at
				// a position nobody read.
				cn.c.wrote(ctx, host, 0)
			}
			return err
		}
		if readOnly25006(err) && p.class != sqlclass.Read {
			// The host we believed primary is a standby now. In autocommit
			// nothing ran: wait for the topology to follow, then retry once.
			cn.c.top.ProbeNow(cn.host)
			host, epoch := cn.host, cn.epoch
			cn.closePrimary()
			if cn.pinned || inTx || attempt > 0 {
				cn.bad = true
				return err
			}
			if werr := cn.c.waitChange(ctx, host, epoch, p.op, time.Now().Add(cn.c.cfg.WriteTimeout)); werr != nil {
				return err
			}
			ev.Retried = true
			continue
		}
		if p.class != sqlclass.Read && !cn.inSQLTx() {
			switch {
			case positioned && cl.isQuery:
				// Raised when the rows are closed.
			case positioned:
				cn.c.wroteAfter(ctx, cn.host, pos, err)
			case err == nil && cl.rows != nil:
				// A statement returning rows: it commits once its rows are
				// all sent, and the session is busy until they are closed;
				// raise the watermark then.
				cl.rows = &wroteRows{Rows: cl.rows.(*stdlib.Rows), cn: cn, ctx: ctx, host: cn.host}
			default:
				// Committed (autocommit, or COMMIT): raise the watermark,
				// even after an error, since part of a string may have
				// run.
				cn.c.wrote(ctx, cn.host, cn.insertLSN(ctx))
			}
		}
		return err
	}
}

// insertLSN reads the primary's WAL insert position after a commit: every
// commit this session made is at or before it. 0 when it cannot be read.
func (cn *conn) insertLSN(ctx context.Context) lagmeter.LSN {
	if cn.primary == nil || cn.c.cfg.Consistency != dsn.ConsistencySession {
		return 0
	}
	var s string
	if err := cn.primary.Conn().QueryRow(context.WithoutCancel(ctx), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		return 0
	}
	lsn, err := lagmeter.ParseLSN(s)
	if err != nil {
		return 0
	}
	return lsn
}

// runOnReplicas runs a read on the planned replica. When the replica's
// connection fails before any row, or the standby cancels the read for a
// recovery conflict, it tries one other eligible replica. When a replica
// refuses the statement with SQLSTATE 25006 (it was not a read after all),
// or no replica could run it, it sets ev.Primary and the caller runs it on
// the primary, unless the read was forced to a replica.
func (cn *conn) runOnReplicas(ctx context.Context, p *plan, ev *RouteEvent, cl *call) error {
	host := p.host
	for attempt := 0; ; attempt++ {
		ev.Endpoint = cn.c.hosts[host].Name
		err := cn.runOnReplica(ctx, host, p, cl)
		if err == nil {
			cn.c.breakers[host].ReportSuccess()
			return nil
		}
		if circuit.Classify(ctx, err) == circuit.Failure {
			cn.c.breakers[host].ReportFailure()
		}
		if errors.Is(err, errNotCaughtUp) {
			if !cn.c.mayFallBack(p) {
				return &RouteError{Op: OpRead, Reason: ReasonBehind}
			}
			ev.Primary, ev.Reason = true, ReasonBehind
			return err
		}
		if readOnly25006(err) {
			if p.forced == Replica {
				return err
			}
			ev.Primary, ev.Retried, ev.Reason = true, true, ReasonRetry25006
			p.class = sqlclass.Unknown // it wrote: raise the watermark after it runs
			return err
		}
		if ctx.Err() != nil || !replicaRetryable(err) {
			return err
		}
		cn.c.top.ProbeNow(host)
		ev.Retried = true
		next := pick{host: -1}
		if attempt == 0 {
			s := cn.c.top.Snapshot()
			if rc, err := cn.c.readCtx(ctx, s, true); err == nil {
				next = cn.c.pickReplica(s, rc, true, host)
			}
		}
		if next.host < 0 {
			if !cn.c.mayFallBack(p) {
				return &RouteError{Op: OpRead, Reason: ReasonUnhealthy, cause: err}
			}
			ev.Primary, ev.Reason = true, ReasonReplicaFailed
			return err
		}
		host, p.check, p.wm = next.host, next.check, next.wm
	}
}

// mayFallBack reports whether a read planned for a replica may run on the
// primary instead: not when forced to a replica, nor under
// pgrouted_fallback=error.
func (c *Connector) mayFallBack(p *plan) bool {
	return p.forced != Replica && c.cfg.Fallback != dsn.FallbackError
}

// errNotCaughtUp: the inline check found the replica behind the caller's
// writes.
var errNotCaughtUp = errors.New("pgrouted: replica has not replayed the caller's writes")

// borrow takes a connection from host's pool. With p.check, it first reads
// the replica's replay position on that connection, and gives it back with
// errNotCaughtUp when the replica lacks the caller's writes; a position
// that passes refreshes what the connector knows of the replica.
func (cn *conn) borrow(ctx context.Context, host int, check bool, wm lagmeter.Watermark) (*borrowed, error) {
	dc, err := cn.c.replicas[host].Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc := cn.c.inflight[host].add(dc.(*stdlib.Conn), cn.c, host)
	if check {
		if err := cn.checkReplay(ctx, sc, host, wm); err != nil {
			sc.giveBack()
			return nil, err
		}
	}
	return sc, nil
}

// checkReplay reads the replica's replay position on b, refreshes what the
// connector knows of the replica with it, and returns errNotCaughtUp when
// the replica lacks the caller's writes (wm).
func (cn *conn) checkReplay(ctx context.Context, b *borrowed, host int, wm lagmeter.Watermark) error {
	snap := cn.c.top.Snapshot()
	h := snap.Hosts[host]
	var text *string
	if err := b.Conn.Conn().QueryRow(ctx, "SELECT pg_last_wal_replay_lsn()::text").Scan(&text); err != nil {
		return err
	}
	if text != nil {
		if lsn, err := lagmeter.ParseLSN(*text); err == nil && lsn != 0 {
			ok, _ := wm.ReachedBy(lagmeter.Position{SystemID: h.SystemID, Timeline: h.Timeline, Replay: lsn}, switchPoint(snap, wm.Timeline))
			cn.c.noteReplay(host, h.Conn, lsn)
			if ok {
				return nil
			}
		}
	}
	return errNotCaughtUp
}

// runOnReplica borrows a connection from host's pool and runs cl on it.
// Rows keep the connection until they are closed.
func (cn *conn) runOnReplica(ctx context.Context, host int, p *plan, cl *call) error {
	if p.check && cn.pipelinable(host, cl) {
		sc, err := cn.borrow(ctx, host, false, p.wm)
		if err != nil {
			return err
		}
		if err := cn.readChecked(ctx, sc, host, p.wm, cl); err != nil {
			sc.giveBack()
			return err
		}
		return nil
	}
	sc, err := cn.borrow(ctx, host, p.check, p.wm)
	if err != nil {
		return err
	}
	if err := cl.on(ctx, sc.Conn); err != nil {
		sc.giveBack()
		return err
	}
	if cl.rows != nil {
		cl.rows = &replicaRows{Rows: cl.rows.(*stdlib.Rows), conn: sc}
	} else {
		sc.giveBack()
	}
	return nil
}

// replicaRows are rows from a borrowed replica connection, which goes back
// to its pool when they are closed. Embedding *stdlib.Rows keeps its column
// type methods.
type replicaRows struct {
	*stdlib.Rows
	conn *borrowed
}

// Close implements driver.Rows.
func (r *replicaRows) Close() error {
	err := r.Rows.Close()
	if r.conn != nil {
		r.conn.giveBack()
		r.conn = nil
	}
	return err
}

// wroteRows are the rows of an autocommit statement that wrote on the
// primary: closing them raises the read-your-writes watermark.
type wroteRows struct {
	*stdlib.Rows
	cn   *conn
	ctx  context.Context
	host int
	done bool
}

// Close implements driver.Rows.
func (r *wroteRows) Close() error {
	err := r.Rows.Close()
	if !r.done {
		r.done = true
		if r.cn.primary != nil && !r.cn.inSQLTx() {
			r.cn.c.wrote(r.ctx, r.host, r.cn.insertLSN(r.ctx))
		} else {
			r.cn.c.wrote(r.ctx, r.host, 0)
		}
	}
	return err
}

// borrowed is a replica connection taken from a host's pool; it counts as
// one of the host's in-flight reads until it is given back.
type borrowed struct {
	*stdlib.Conn
	c     *Connector
	host  int
	given bool
}

// giveBack returns the connection to its pool (the pool drops it if it
// broke). Later calls do nothing.
func (b *borrowed) giveBack() {
	if b.given {
		return
	}
	b.given = true
	b.c.inflight[b.host].remove(b)
	b.Conn.Close()
}

// hostFlight is a host's borrowed connections, so that reads stuck on a host
// that stopped answering can be interrupted when its probe fails.
type hostFlight struct {
	n     atomic.Int64 // in-flight reads, for selection and observation
	mu    sync.Mutex
	conns map[*borrowed]struct{}
}

func (f *hostFlight) add(sc *stdlib.Conn, c *Connector, host int) *borrowed {
	b := &borrowed{Conn: sc, c: c, host: host}
	f.n.Add(1)
	f.mu.Lock()
	if f.conns == nil {
		f.conns = make(map[*borrowed]struct{})
	}
	f.conns[b] = struct{}{}
	f.mu.Unlock()
	return b
}

func (f *hostFlight) remove(b *borrowed) {
	f.mu.Lock()
	if _, ok := f.conns[b]; ok {
		delete(f.conns, b)
		f.n.Add(-1)
	}
	f.mu.Unlock()
}

// abort closes the network connection under every borrowed connection: a
// read waiting on a host that stopped answering fails at once, and runs
// elsewhere if no row reached the caller yet.
func (f *hostFlight) abort() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for b := range f.conns {
		b.Conn.Conn().PgConn().Conn().Close()
	}
	return len(f.conns)
}

// PrepareContext implements driver.ConnPrepareContext. Nothing is sent:
// each execution is routed like any statement and pgx prepares it on the
// connection that runs it, once per physical connection, and caches it.
func (cn *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if cn.bad {
		return nil, driver.ErrBadConn
	}
	return &stmt{cn: cn, query: query}, nil
}

// Prepare implements driver.Conn.
func (cn *conn) Prepare(query string) (driver.Stmt, error) {
	return cn.PrepareContext(context.Background(), query)
}

// Begin implements driver.Conn.
func (cn *conn) Begin() (driver.Tx, error) {
	return cn.BeginTx(context.Background(), driver.TxOptions{})
}

// CheckNamedValue implements driver.NamedValueChecker: pgx converts every
// argument itself, driver.Valuer and sql.Scanner included.
func (cn *conn) CheckNamedValue(*driver.NamedValue) error { return nil }

// Ping implements driver.Pinger: it checks the primary session, opening it
// if needed (waiting up to pgrouted_write_timeout for a primary).
func (cn *conn) Ping(ctx context.Context) error {
	sc, err := cn.primaryConn(ctx, OpWrite)
	if err != nil {
		return err
	}
	if err := sc.Ping(ctx); err != nil {
		cn.primary = nil // stdlib closed it
		if cn.pinned {
			cn.bad = true
		}
		return driver.ErrBadConn
	}
	return nil
}

// epochChanged reports whether the primary session belongs to an older
// primary than the topology's current one.
func (cn *conn) epochChanged() bool {
	return cn.primary != nil && cn.c.top.Snapshot().Epoch != cn.epoch
}

// ResetSession implements driver.SessionResetter: database/sql calls it
// before reusing the connection.
func (cn *conn) ResetSession(ctx context.Context) error {
	if cn.bad || cn.epochChanged() {
		return driver.ErrBadConn
	}
	if cn.primary != nil {
		if err := cn.primary.ResetSession(ctx); err != nil {
			cn.closePrimary()
			if cn.pinned {
				return driver.ErrBadConn
			}
		}
	}
	return nil
}

// IsValid implements driver.Validator: a connection whose primary session
// belongs to an older primary epoch, or that failed, is not reused.
func (cn *conn) IsValid() bool {
	return !cn.bad && !cn.epochChanged()
}

// Close implements driver.Conn.
func (cn *conn) Close() error {
	if cn.tx != nil {
		cn.tx.release()
	}
	cn.closePrimary()
	if cn.ownsConnector {
		return cn.c.Close()
	}
	return nil
}

var (
	_ driver.Conn               = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
)
