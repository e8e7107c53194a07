package pgrouted

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

// tx is a database/sql transaction: on the primary session, or, for a
// read-only one, on a connection borrowed from a replica's pool for its
// whole life.
type tx struct {
	cn      *conn
	ctx     context.Context
	inner   driver.Tx
	replica *borrowed         // the borrowed connection of a replica transaction
	host    *host             // the host that runs it
	wrote   bool              // a read-write transaction on the primary
	begin   *driver.TxOptions // BeginTx's options (nil for the pgx-native API's): see tx.restart
	tainted bool              // session state was changed on the borrowed connection
	stale   txStale           // the recovery from stale statements (txstale.go)
	// in is the read-your-writes intent of its BEGIN's context: the raise
	// of the marks after its commit uses it, for the relations its
	// statements wrote (writes).
	in     consistency.Intent
	writes sqlclass.Scope
}

// BeginTx implements driver.ConnBeginTx. Where the transaction runs is
// the connector's decision (Connector.plan), made by the rules of an
// autocommit read: read-write transactions run on the primary; a
// read-only one runs on one eligible replica for its whole life when
// pgrouted_readonly_tx=replica (the default), except at SERIALIZABLE
// isolation, which a hot standby does not support and which therefore runs
// on the primary. BeginTx executes that decision, with the replica path's
// check, retry elsewhere and fallback. Isolation levels PostgreSQL does not
// have (write committed, linearizable) are refused.
func (cn *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if cn.bad {
		return nil, driver.ErrBadConn
	}
	if cn.tx != nil {
		return nil, errors.New("pgrouted: a transaction is already open on this connection")
	}
	iso := sql.IsolationLevel(opts.Isolation)
	switch iso {
	case sql.LevelDefault, sql.LevelReadUncommitted, sql.LevelReadCommitted,
		sql.LevelRepeatableRead, sql.LevelSnapshot, sql.LevelSerializable:
	default:
		return nil, fmt.Errorf("pgrouted: isolation level %s is not supported by PostgreSQL", iso)
	}
	cl := newSQLCall(callText{kind: callBegin, query: "BEGIN", begin: &opts})
	t, err := cn.begin(ctx, opts.ReadOnly, iso == sql.LevelSerializable, cl)
	cl.recycle()
	if err != nil {
		return nil, err
	}
	return t, nil
}

// begin opens the transaction of cl (BEGIN) where the connector decides:
// BeginTx's, and the pgx-native API's (pool_tx.go).
func (cn *conn) begin(ctx context.Context, readOnly, serializable bool, cl *call) (_ *tx, err error) {
	cn.used()
	began := cn.c.began(ctx, cl.query)
	var p plan
	cn.c.plan(ctx, &request{begin: true, readOnly: readOnly, serializable: serializable, pinned: cn.pinned, inTx: cn.inSQLTx()}, true, &p)
	var o outcome
	defer func() { cn.c.report(ctx, &p, cl, o, began, err) }()
	if p.err != nil {
		return nil, p.err
	}
	o, done, err := cn.onReplicas(ctx, &p, cl)
	if done {
		if err != nil {
			return nil, err
		}
		// Its intent: what it saw is recorded once it ends, under causal
		// consistency (tx.sawAfter).
		cn.tx.in = p.in
		return cn.tx, nil
	}
	t, next, err := cn.beginOnPrimary(ctx, &p, cl, readOnly)
	o = o.then(next)
	return t, err
}

// beginOnPrimary opens a transaction on the primary session, planned p;
// its outcome is where it ran.
func (cn *conn) beginOnPrimary(ctx context.Context, p *plan, cl *call, readOnly bool) (*tx, outcome, error) {
	sc, err := cn.primaryConn(ctx, OpTx)
	if err != nil {
		return nil, outcome{}, err
	}
	o := outcome{ran: cn.host, primary: true}
	inner, err := cl.ex.begin(ctx, cl, sc)
	if err != nil {
		if errors.Is(err, driver.ErrBadConn) {
			cn.closePrimary()
			cn.bad = true
		}
		return nil, o, err
	}
	cn.tx = &tx{cn: cn, ctx: ctx, inner: inner, host: cn.host, wrote: !readOnly, begin: cl.begin, in: p.in, writes: sqlclass.NoRelation}
	return cn.tx, o, nil
}

// run runs a statement inside the transaction, on its connection, and
// returns its outcome.
func (t *tx) run(ctx context.Context, r sqlclass.Result, cl *call, began started) (outcome, error) {
	cn := t.cn
	var sc *stdlib.Conn
	switch {
	case t.replica == nil:
		sc = cn.primary
		if r.Has(sqlclass.Session) {
			cn.pin() // a SET in a transaction outlives its commit
		}
	default:
		sc = t.replica.sc
		if r.Has(sqlclass.Session) {
			t.tainted = true
		}
	}
	t.noteWrites(r)
	// A statement refused as stale runs again after a rollback to a
	// savepoint (txstale.go).
	recovered, err := t.exec(ctx, sc, r, cl)
	if err != nil {
		// A stale statement of pgx's path aborted the transaction: its
		// descriptions are dropped, and the error returned.
		cn.runAgain(err, cl, 0)
		if t.replica == nil {
			err = termEndedErr(opOf(r.Class), err, cn.term, sc)
		}
	}
	err = withPoolerHint(err)
	o := t.ranHere()
	if recovered {
		o.reruns = 1
	}
	t.cn.c.report(ctx, &plan{op: opOf(r.Class), reason: ReasonInTx}, cl, o, began, err)
	return o, err
}

// noteWrites adds what a statement of the transaction, classified r, writes to
// the relations its commit raises the marks of: nothing for a read, a
// lock or transaction control (a SAVEPOINT writes nothing), its named
// relations for a DML statement that names them, every relation for
// anything else.
func (t *tx) noteWrites(r sqlclass.Result) {
	switch r.Class {
	case sqlclass.Read, sqlclass.Lock, sqlclass.Tx:
		return
	}
	t.writes.Union(r.Writes)
}

// Commit implements driver.Tx. After a read-write transaction commits, the
// read-your-writes marks are raised to the primary's position.
func (t *tx) Commit() error {
	began := t.cn.c.began(t.ctx, "COMMIT")
	cn := t.cn
	if !t.wrote || cn.primary == nil || !t.in.Positioned() {
		err := t.inner.Commit()
		if t.replica == nil {
			err = termEndedErr(OpTx, err, cn.term, cn.primary)
		}
		if !t.wrote {
			t.sawAfter()
		}
		t.end(began, "COMMIT", err)
		switch {
		case !t.wrote || t.replica != nil || !t.in.Defers():
		case err == nil:
			// Its position is read when a read needs it.
			cn.c.raiseDeferred(&t.in, t.writes, t.host)
		default:
			cn.c.raiseOutcome(&t.in, t.writes, t.host, 0, time.Time{}, err)
		}
		return err
	}
	// One round trip: COMMIT, then the position after it.
	sc := cn.primary
	sent := consistency.Now()
	pos, err := cn.commitPositioned(t.ctx)
	// The primary was replaced before it answered: the transaction may
	// have committed there.
	err = termEndedErr(OpTx, err, cn.term, sc)
	t.end(began, "COMMIT", err)
	cn.c.raiseOutcome(&t.in, t.writes, t.host, pos, sent, err)
	return err
}

// Rollback implements driver.Tx.
func (t *tx) Rollback() error {
	began := t.cn.c.began(t.ctx, "ROLLBACK")
	err := t.inner.Rollback()
	t.sawAfter()
	t.end(began, "ROLLBACK", err)
	return err
}

func (t *tx) end(began started, query string, err error) {
	cn := t.cn
	t.release()
	if cn.catalogPending {
		cn.catalogChanged()
	}
	if errors.Is(err, driver.ErrBadConn) && t.replica == nil {
		cn.closePrimary()
		cn.bad = true
	}
	cl := newSQLCall(callText{query: query})
	t.cn.c.report(t.ctx, &plan{op: OpTx, reason: ReasonInTx}, cl, t.ranHere(), began, err)
	cl.recycle()
}

// ranHere is the outcome of a statement that ran inside the transaction,
// on its connection.
func (t *tx) ranHere() outcome {
	return outcome{ran: t.host, primary: t.replica == nil}
}

// release ends the transaction's hold on its connection: a borrowed replica
// connection goes back to its pool, or is closed if session state was
// changed on it.
func (t *tx) release() {
	t.cn.tx = nil
	if t.replica != nil {
		if t.tainted {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			t.replica.conn().Close(ctx)
			cancel()
		}
		t.replica.giveBack()
	}
}

var _ driver.Tx = (*tx)(nil)
