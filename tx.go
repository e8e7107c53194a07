package pgrouted

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

// tx is a database/sql transaction: on the primary session, or, for a
// read-only one, on a connection borrowed from a replica's pool for its
// whole life.
type tx struct {
	cn      *conn
	ctx     context.Context
	inner   driver.Tx
	replica *borrowed // the borrowed connection of a replica transaction
	host    int       // the host that runs it
	wrote   bool      // a read-write transaction on the primary
	tainted bool      // session state was changed on the borrowed connection
}

// errSerializableOnStandby explains why a SERIALIZABLE transaction forced
// to a replica cannot run.
var errSerializableOnStandby = errors.New("pgrouted: a SERIALIZABLE transaction cannot run on a replica: PostgreSQL does not support serializable isolation on a hot standby; use REPEATABLE READ, or let it run on the primary")

// BeginTx implements driver.ConnBeginTx. Read-write transactions run on
// the primary. A read-only one runs on one eligible replica for its whole
// life when pgrouted_readonly_tx=replica (the default), except at
// SERIALIZABLE isolation, which a hot standby does not support and which
// therefore runs on the primary. Isolation levels PostgreSQL does not have
// (write committed, linearizable) are refused.
func (cn *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if cn.bad {
		return nil, driver.ErrBadConn
	}
	if cn.tx != nil {
		return nil, errors.New("pgrouted: a transaction is already open on this connection")
	}
	began := time.Now()
	iso := sql.IsolationLevel(opts.Isolation)
	switch iso {
	case sql.LevelDefault, sql.LevelReadUncommitted, sql.LevelReadCommitted,
		sql.LevelRepeatableRead, sql.LevelSnapshot, sql.LevelSerializable:
	default:
		return nil, fmt.Errorf("pgrouted: isolation level %s is not supported by PostgreSQL", iso)
	}
	route := routeFrom(ctx)
	ev := RouteEvent{Decision: Decision{Op: OpTx}, Query: "BEGIN"}
	defer func() {
		ev.Duration = time.Since(began)
		cn.c.report(ev)
	}()
	fail := func(err error) (driver.Tx, error) {
		ev.Err = err
		return nil, err
	}
	if !opts.ReadOnly && route == Replica {
		ev.Reason = ReasonWriteOnReplica
		return fail(&RouteError{Op: OpTx, Reason: ReasonWriteOnReplica})
	}
	onReplica := opts.ReadOnly && route != Primary && !cn.pinned && !cn.inSQLTx() &&
		(route == Replica || cn.c.cfg.ReadOnlyTx == dsn.ReadOnlyTxReplica)
	if onReplica && iso == sql.LevelSerializable {
		if route == Replica {
			return fail(errSerializableOnStandby)
		}
		onReplica, ev.Reason = false, ReasonSerializableRO
	}
	if onReplica {
		snap := cn.c.top.Snapshot()
		rc, err := cn.c.readCtx(ctx, snap, true)
		if err != nil {
			return fail(err)
		}
		ev.WriteLost = rc.lost
		pk := cn.c.pickReplica(snap, rc, true, -1)
		host, reason := pk.host, pk.reason
		if host >= 0 {
			t, err := cn.beginOnReplica(ctx, host, pk, opts)
			if err == nil {
				ev.Endpoint, ev.Reason = cn.c.hosts[host].Name, ReasonReadOnlyTx
				if route == Replica {
					ev.Reason = ReasonForced
				}
				return t, nil
			}
			switch {
			case errors.Is(err, errNotCaughtUp):
				reason = ReasonBehind
				if route == Replica {
					return fail(&RouteError{Op: OpTx, Reason: ReasonBehind})
				}
			case route == Replica || !replicaRetryable(err):
				ev.Endpoint = cn.c.hosts[host].Name
				return fail(err)
			default:
				reason = ReasonReplicaFailed
				ev.Retried = true
			}
		}
		if host < 0 && (route == Replica || cn.c.cfg.Fallback == dsn.FallbackError) {
			ev.Reason = reason
			return fail(&RouteError{Op: OpTx, Reason: reason})
		}
		ev.Reason = reason
	}
	if ev.Reason == "" {
		ev.Reason = ReasonWrite
		if route == Primary {
			ev.Reason = ReasonForced
		} else if opts.ReadOnly {
			ev.Reason = ReasonReadOnlyTx
		}
	}
	sc, err := cn.primaryConn(ctx, OpTx)
	if err != nil {
		return fail(err)
	}
	ev.Primary, ev.Endpoint = true, cn.c.hosts[cn.host].Name
	inner, err := sc.BeginTx(ctx, opts)
	if err != nil {
		if errors.Is(err, driver.ErrBadConn) {
			cn.closePrimary()
			cn.bad = true
		}
		return fail(err)
	}
	cn.tx = &tx{cn: cn, ctx: ctx, inner: inner, host: cn.host, wrote: !opts.ReadOnly}
	return cn.tx, nil
}

func (cn *conn) beginOnReplica(ctx context.Context, host int, pk pick, opts driver.TxOptions) (*tx, error) {
	sc, err := cn.borrow(ctx, host, pk.check, pk.wm)
	if err != nil {
		return nil, err
	}
	inner, err := sc.BeginTx(ctx, opts)
	if err != nil {
		sc.giveBack()
		return nil, err
	}
	cn.tx = &tx{cn: cn, ctx: ctx, inner: inner, replica: sc, host: host}
	return cn.tx, nil
}

// run runs a statement inside the transaction, on its connection.
func (t *tx) run(ctx context.Context, r sqlclass.Result, cl *call, began time.Time) error {
	cn := t.cn
	var sc *stdlib.Conn
	switch {
	case t.replica == nil:
		sc = cn.primary
		if r.Has(sqlclass.Session) {
			cn.pinned = true // a SET in a transaction outlives its commit
		}
	default:
		sc = t.replica.Conn
		if r.Has(sqlclass.Session) {
			t.tainted = true
		}
	}
	err := cl.on(ctx, sc)
	cn.c.report(RouteEvent{
		Decision: Decision{Op: opOf(r.Class), Endpoint: cn.c.hosts[t.host].Name, Primary: t.replica == nil, Reason: ReasonInTx},
		Query:    cl.query, Duration: time.Since(began), Err: err,
	})
	return err
}

// Commit implements driver.Tx. After a read-write transaction commits, the
// read-your-writes watermark moves to the primary's position.
func (t *tx) Commit() error {
	began := time.Now()
	cn := t.cn
	if !t.wrote || cn.primary == nil || cn.c.cfg.Consistency != dsn.ConsistencySession {
		err := t.inner.Commit()
		t.end(began, "COMMIT", err)
		return err
	}
	// One round trip: COMMIT, then the position after it.
	pos, err := cn.commitPositioned(t.ctx)
	t.end(began, "COMMIT", err)
	cn.c.wroteAfter(t.ctx, t.host, pos, err)
	return err
}

// Rollback implements driver.Tx.
func (t *tx) Rollback() error {
	began := time.Now()
	err := t.inner.Rollback()
	t.end(began, "ROLLBACK", err)
	return err
}

func (t *tx) end(began time.Time, query string, err error) {
	cn := t.cn
	t.release()
	if errors.Is(err, driver.ErrBadConn) && t.replica == nil {
		cn.closePrimary()
		cn.bad = true
	}
	cn.c.report(RouteEvent{
		Decision: Decision{Op: OpTx, Endpoint: cn.c.hosts[t.host].Name, Primary: t.replica == nil, Reason: ReasonInTx},
		Query:    query, Duration: time.Since(began), Err: err,
	})
}

// release ends the transaction's hold on its connection: a borrowed replica
// connection goes back to its pool, or is closed if session state was
// changed on it.
func (t *tx) release() {
	t.cn.tx = nil
	if t.replica != nil {
		if t.tainted {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			t.replica.Conn.Conn().Close(ctx)
			cancel()
		}
		t.replica.giveBack()
	}
}

var _ driver.Tx = (*tx)(nil)
