package pgrouted

import (
	"context"
	"database/sql/driver"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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

// pipelineUse is what a call would be sent in a pgconn pipeline for.
type pipelineUse uint8

const (
	// pipeChecked: a replica read after the check of the replica's
	// position, in one round trip (conn.readChecked).
	pipeChecked pipelineUse = iota
	// pipePositioned: an autocommit write with the read of the position
	// after its commit (conn.positioned).
	pipePositioned
	// pipeTx: a statement in a transaction, between a savepoint and its
	// release (tx.exec).
	pipeTx
)

// pipelines reports whether cl may be sent on host in a pgconn pipeline
// for use: the one rule for every pipelined path. The call must have the
// shape the path reads back (pipeChecked: one statement returning rows, a
// database/sql query or a pgx Query of the Pool; pipePositioned: an Exec
// or a Query, whose command tag or rows the pipeline gives, not pgx's
// batches or copies; pipeTx: one database/sql statement, a query or one
// with arguments: a pgx call in a transaction gets pgx's own rows, and a
// stale refusal aborts the transaction as it does in pgx), and pgx must
// allow it (pgpipe.OK: not in the exec modes the user chose instead of
// pgx's default ones, nor under a pgx QueryTracer). The callers check
// what the statement is (a read, a write, a plain statement in a
// transaction).
func (c *Connector) pipelines(host *host, cl *call, use pipelineUse) bool {
	switch use {
	case pipeChecked:
		if !cl.isQuery || !cl.single || (cl.px != nil && cl.px.kind != pxQuery) {
			return false
		}
	case pipePositioned:
		if !cl.px.positionable() {
			return false
		}
	case pipeTx:
		if !cl.single || cl.px != nil || (!cl.isQuery && len(cl.args) == 0) {
			return false
		}
	}
	cl.px.nameArgs(cl)
	return pgpipe.OK(host.ConnConfig, cl.args)
}

// call is one statement to run (a query or an exec), the BEGIN of a
// transaction or the describe of a Prepare, and its outcome. Its parts
// are by role, each carried by every path that runs a call: what runs
// (callText), what it returned (callResults) and what became of it on the
// way (callOutcome), which its RouteEvent reports (Connector.report) and
// nothing decides on; px is the pgx side of a call of the pgx-native API.
type call struct {
	callText
	callResults
	callOutcome

	// px is set for a call of the pgx-native API (pool.go): pgx runs it,
	// and its results are pgx's (pgxcall.go).
	px *pgxCall
	// saw is set for a read under causal consistency (not one of a
	// transaction begun with BeginTx): what it records once it ended
	// (causal.go).
	saw *sawBy
}

// callKind is what a call runs.
type callKind uint8

const (
	callStatement callKind = iota // a query or an exec
	callBegin                     // BeginTx: the transaction's BEGIN
	callDescribe                  // PrepareContext: describe it (stmt.go)
)

// callText is what a call runs.
type callText struct {
	kind    callKind
	query   string
	args    []driver.NamedValue
	isQuery bool
	single  bool              // one statement (see sqlclass.Result.Statements)
	begin   *driver.TxOptions // callBegin: the transaction's options

	// class is query's classification when classified is set (the Pool
	// classifies a statement before it runs: Pool.refuseSessionState).
	class      sqlclass.Result
	classified bool
}

// callResults is what a call returned to the driver's face: a query's
// rows, an exec's result, a describe's description (a transaction begun
// is its conn's).
type callResults struct {
	rows driver.Rows
	res  driver.Result
	sd   *pgconn.StatementDescription
}

// callOutcome is what became of a call on the way.
type callOutcome struct {
	ran     *host // the host that ran it, or was tried last; nil for none
	primary bool  // ran is the primary
	retried bool  // it ran again, elsewhere or on another connection (RouteEvent.Retried)
	reruns  int   // the runs after a stale statement (stale.go)
	// replicaFailed: a replica's connection failed under it and it ran
	// elsewhere (Stats.ReplicaRetries).
	replicaFailed bool
	waited        time.Duration // how long it waited on replicas for their replay (replicawait.go)
	wrote         time.Time     // the caller's last write, when a replica's check of it is worth recording (consistency.CatchUp)
	sent          time.Time     // (consistency.Now) before it was sent to the primary, and the position read after it
	// unanswered: it failed before the server answered it (no row, no
	// command tag), as far as the path that ran it can tell (see
	// endedUnanswered).
	unanswered bool
}

// on runs cl through pgx on sc with args (cl.args, or them after an exec
// mode option: see Connector.statementArgs).
func (cl *call) on(ctx context.Context, sc *stdlib.Conn, args []driver.NamedValue) error {
	if cl.px != nil {
		return cl.px.on(ctx, cl, sc.Conn(), args)
	}
	if cl.isQuery {
		var err error
		cl.rows, err = sc.QueryContext(ctx, cl.query, args)
		return err
	}
	// stdlib's ExecContext, keeping the command tag an error came with.
	tag, err := pgpipe.ExecPlain(ctx, sc.Conn(), cl.query, args)
	cl.res = driver.RowsAffected(tag.RowsAffected())
	cl.unanswered = err != nil && tag.String() == ""
	return err
}

// ExecContext implements driver.ExecerContext.
func (cn *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	cl := call{callText: callText{query: query, args: args}}
	err := cn.run(ctx, &cl)
	return cl.res, err
}

// QueryContext implements driver.QueryerContext. Rows stream from the
// server; a replica connection goes back to its pool when they are closed.
func (cn *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cl := call{callText: callText{query: query, args: args, isQuery: true}}
	err := cn.run(ctx, &cl)
	return cl.rows, err
}

// pin pins the connection to its primary session: a statement changed
// session state (or may have: a function the catalog cannot vouch for, a
// read a replica refused), which a replica session would not have, so
// everything runs on the primary session from then on (plan: ReasonPinned).
func (cn *conn) pin() {
	if cn.pinned {
		return
	}
	cn.pinned = true
	cn.c.warnPinnedBehindPooler(cn.host)
}

// inSQLTx reports whether the primary session is inside a transaction that
// was opened with SQL (BEGIN) rather than with BeginTx.
func (cn *conn) inSQLTx() bool {
	return cn.primary != nil && cn.primary.Conn().PgConn().TxStatus() != 'I'
}

// run routes one statement and runs it: the connector decides (plan.go),
// the primary path (primary.go, primaryrun.go) or the replica path
// (replica.go) executes, and the RouteEvent says what happened.
func (cn *conn) run(ctx context.Context, cl *call) (err error) {
	cn.used()
	if cn.bad {
		return driver.ErrBadConn
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
	if cl.px.batched() {
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
	defer func() { cn.c.report(ctx, &p, cl, began, err) }()
	if p.err != nil {
		return p.err
	}
	for {
		err := cn.execute(ctx, &p, r, cl)
		if err != nil && ctx.Err() == nil && cl.primary && cn.runAgain(err, cl) {
			// A stale statement, refused before it ran on the primary
			// session (stale.go): again, freshly described. The replica
			// path does the same on its connection.
			continue
		}
		return withPoolerHint(err)
	}
}

// execute runs cl where p says: on a replica, then on the primary when the
// replica path fell back (onReplicas), or on the primary; a fallback read
// within pgrouted_primary_read_limit (primarylimit.go).
func (cn *conn) execute(ctx context.Context, p *plan, r *sqlclass.Result, cl *call) error {
	if p.in.Level == consistency.Causal && cl.saw == nil {
		cl.saw = cn.c.sawFor(p)
	}
	if done, err := cn.onReplicas(ctx, p, cl); done {
		return err
	}
	if cn.c.reads.limit > 0 && p.isFallback() {
		return cn.limitedOnPrimary(ctx, p, r, cl)
	}
	return cn.runOnPrimary(ctx, p, r, cl)
}

// catalogChanged asks for a new snapshot of the function catalog, and
// forgets the statement descriptions, after a statement that may have
// changed them, once no transaction hides the change
// from other sessions.
func (cn *conn) catalogChanged() {
	if cn.tx != nil || cn.inSQLTx() {
		cn.catalogPending = true
		return
	}
	cn.catalogPending = false
	cn.c.funcs.changed()
	cn.c.schemaChanged()
	// The schema may have changed too: describe statements again (a
	// change made elsewhere is met by the recovery of stale.go).
	for _, h := range cn.c.hosts.all() {
		h.descs.Reset()
	}
	if cn.descs != nil {
		cn.descs.Reset()
	}
}

// PrepareContext implements driver.ConnPrepareContext. The statement is
// checked on the server, parsed and described in one round trip as pgx
// does (an invalid one fails here with the server's error), and its
// description is kept for the executions on that host; each execution is
// then routed like any statement (stmt.go).
func (cn *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	cn.used()
	if cn.bad {
		return nil, driver.ErrBadConn
	}
	sd, err := cn.describe(ctx, query)
	if err != nil {
		return nil, err
	}
	return &stmt{cn: cn, query: query, numInput: len(sd.ParamOIDs)}, nil
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
		cn.closePrimary() // stdlib closed it
		if cn.pinned {
			cn.bad = true
		}
		return driver.ErrBadConn
	}
	return nil
}

// epochChanged reports whether the primary session belongs to an older
// primary than the topology's current one, or to a term that ended.
func (cn *conn) epochChanged() bool {
	return cn.primary != nil && (cn.c.top.Snapshot().Epoch != cn.epoch || cn.term == nil || cn.term.ended())
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
