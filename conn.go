package pgrouted

import (
	"context"
	"database/sql/driver"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

// conn is one database/sql connection: a primary session, opened when a
// statement first needs the primary, plus replica connections borrowed from
// the connector's pools for each read. database/sql uses it from one
// goroutine at a time.
type conn struct {
	c *Connector

	primary *stdlib.Conn // nil until needed
	host    *host        // the primary session's host
	epoch   uint64       // the topology epoch the primary session belongs to
	term    *term        // the primary's term the session belongs to (term.go)

	// pinned is set once a statement changed session state: from then on
	// everything runs on the primary session.
	pinned bool
	tx     *tx  // the open database/sql transaction, if any
	bad    bool // the connection must be discarded

	// catalogPending is set when a statement that may change the function
	// catalog ran inside a transaction: the catalog is read again once it
	// ended.
	catalogPending bool

	// descs are the statement descriptions of a pinned primary session
	// (see descsOf).
	descs *pgpipe.Descs

	ownsConnector bool // opened by Driver.Open: Close closes the Connector

	// The primary session's place among the Connector's
	// (primarysessions.go): when it opened and when its lifetime ends
	// (zero: never), and whether the connection is parked (put back
	// unused by its pool, since idleSince), in the list of parked ones.
	// While it is parked these and the session fields are the
	// Connector's primarySessions', under its lock.
	born, expires, idleSince time.Time
	parked                   bool
	parkedIdle               bool // parked with a session, counted in idleFree (when nothing is maintained)
	parkPrev, parkNext       *conn
	// warming: the connection is the health check's, opening a session
	// to keep (it neither waits for a slot nor counts as an acquire).
	warming bool
}

// ExecContext implements driver.ExecerContext.
func (cn *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	cl := newSQLCall(callText{query: query, args: args})
	err := cn.run(ctx, cl)
	res := cl.res
	cl.recycle()
	return res, err
}

// QueryContext implements driver.QueryerContext. Rows stream from the
// server; a replica connection goes back to its pool when they are closed.
func (cn *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cl := newSQLCall(callText{query: query, args: args, isQuery: true})
	err := cn.run(ctx, cl)
	rows := cl.rows
	cl.recycle()
	return rows, err
}

// run routes one statement and runs it: the connector decides (plan.go),
// the primary path (primary.go, primaryrun.go) or the replica path
// (replica.go) executes, and the RouteEvent says what happened.
func (cn *conn) run(ctx context.Context, cl *call) error {
	_, err := cn.runAfter(ctx, cl, outcome{})
	return err
}

// runAfter is run for a call whose outcome so far is o (what became of it
// on another connection: Pool.run), and returns its outcome, which its
// report gave.
func (cn *conn) runAfter(ctx context.Context, cl *call, o outcome) (_ outcome, err error) {
	cn.used()
	if cn.bad {
		return o, driver.ErrBadConn
	}
	began := cn.c.began(ctx, cl.query)
	q := request{pinned: cn.pinned}
	if cl.classified {
		q.r = cl.class
	} else {
		cn.c.classify(ctx, cl.query, &q.r)
	}
	r := &q.r
	cl.single = r.Statements == 1
	if cl.ex.batched() {
		// The text is the batch's most dangerous statement: the others
		// read and write relations it does not name.
		r.Reads, r.Writes = sqlclass.AllRelations, sqlclass.AllRelations
	}
	if r.ChangesCatalog || cn.catalogPending {
		defer cn.catalogChanged()
	}
	if cn.tx != nil {
		return cn.tx.run(ctx, *r, cl, began)
	}
	var p plan
	q.inTx, q.fn, q.refused = cn.inSQLTx(), r.FuncName(cl.query), cn.c.refused.has(cl.query)
	cn.c.plan(ctx, &q, true, &p)
	defer func() { cn.c.report(ctx, &p, cl, o, began, err) }()
	if p.err != nil {
		return o, p.err
	}
	for {
		step, err := cn.execute(ctx, &p, r, cl)
		o = o.then(step)
		if err != nil && ctx.Err() == nil && o.primary && cn.runAgain(err, cl, o.reruns) {
			// A stale statement, refused before it ran on the primary
			// session (stale.go): again, freshly described. The replica
			// path does the same on its connection.
			o.reruns++
			continue
		}
		return o, withPoolerHint(err)
	}
}

// execute runs cl where p says: on a replica, then on the primary when the
// replica path fell back (onReplicas), or on the primary; a fallback read
// within pgrouted_primary_read_limit (primarylimit.go). Its outcome joins
// the paths'.
func (cn *conn) execute(ctx context.Context, p *plan, r *sqlclass.Result, cl *call) (outcome, error) {
	if p.in.Level == consistency.Causal && cl.saw == nil {
		cl.saw = cn.c.sawFor(p)
	}
	o, done, err := cn.onReplicas(ctx, p, cl)
	if done {
		return o, err
	}
	var next outcome
	if cn.c.reads.limit > 0 && p.isFallback() {
		next, err = cn.limitedOnPrimary(ctx, p, r, cl, o.waited)
	} else {
		next, err = cn.runOnPrimary(ctx, p, r, cl)
	}
	return o.then(next), err
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
		cn.closePrimary() // stdlib closed it
		if cn.pinned {
			cn.bad = true
		}
		return driver.ErrBadConn
	}
	return nil
}

// ResetSession implements driver.SessionResetter: database/sql calls it
// before reusing the connection (and a Pool, before reusing an idle one).
// The connection is no longer parked (primarysessions.go); one whose
// session state was lost (its session closed past its lifetime) is
// dropped.
func (cn *conn) ResetSession(ctx context.Context) error {
	if !cn.c.prim.unpark(cn) {
		return driver.ErrBadConn
	}
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
// belongs to an older primary epoch, or that failed, or whose session
// holds session state past its lifetime (pool_max_conn_lifetime), is not
// reused. database/sql (and a Pool) call it when the connection is put
// back: a valid one is parked from then on (primarysessions.go).
func (cn *conn) IsValid() bool {
	return !cn.bad && !cn.epochChanged() && cn.c.prim.park(cn)
}

// Close implements driver.Conn.
func (cn *conn) Close() error {
	cn.c.prim.forget(cn)
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
