package pgrouted

import (
	"context"
	"database/sql/driver"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// executor is how one face of the driver runs a call on a session the
// routing core chose, and hands its results to its caller: database/sql's
// (sqlExec, below: stdlib's rows and results, and the driver's rows
// wrappers of rows.go) or pgx's (pgxCall, pgxcall.go: pgx's rows, command
// tags, batch results and transactions, for Pool, PoolConn and their
// transactions). Every call carries its face (call.ex); the routing core
// (the primary and replica paths, transactions, reports) runs a call
// through it and never asks which face it is.
type executor interface {
	// What the face allows of the call.

	// pipeable reports whether the face lets cl be sent in a pgconn
	// pipeline for use (the shape part of Connector.pipelines).
	pipeable(cl *call, use pipelineUse) bool
	// nameArgs gives cl its arguments as the driver's paths take them
	// (cl.args), when the face keeps them otherwise.
	nameArgs(cl *call)
	// once reports whether the call may not run a second time (its input
	// is read as it is sent).
	once() bool
	// unpinned reports whether a session-state statement of the call
	// leaves the connection unpinned (an autocommit call of the Pool).
	unpinned() bool
	// batched reports whether the call is a batch of statements, whose
	// text is one of them.
	batched() bool
	// refusal is a replica's refusal of the call, known before it is sent
	// (a batch's, read from its results), or nil.
	refusal() error

	// Running it.

	// run runs cl on the session sc, as the path says (as), with args
	// (cl.args, or them after an exec mode option:
	// Connector.statementArgs). unanswered: it failed before the server
	// answered it (no row, no command tag), as far as the face can tell
	// (see endedUnanswered).
	run(ctx context.Context, cl *call, sc *stdlib.Conn, args []driver.NamedValue, as sendAs) (unanswered bool, err error)
	// begin begins cl's transaction on sc.
	begin(ctx context.Context, cl *call, sc *stdlib.Conn) (driver.Tx, error)
	// queryWrite runs cl, a query that is not a read, in autocommit on
	// cn's primary session sc, not pipelined with its position: its
	// results raise the marks (intent in, relations ws) once closed
	// (raiseOnClose). unanswered as for run.
	queryWrite(ctx context.Context, cn *conn, in consistency.Intent, ws sqlclass.Scope, sc *stdlib.Conn, cl *call) (unanswered bool, err error)
	// queryPositioned runs cl, a query, on cn's primary session sc, as as
	// says, pipelined with the read of the position after its commit, read
	// at the rows' end: for a query that is not a read, the marks are then
	// raised; for a read under causal consistency (cl.saw), it is the
	// bound of what it saw. unanswered as for run.
	queryPositioned(ctx context.Context, cn *conn, in consistency.Intent, ws sqlclass.Scope, sc *stdlib.Conn, cl *call, as sendAs) (unanswered bool, err error)
	// execResult keeps tag, the command tag of an exec that ran in a
	// pipeline, as cl's result.
	execResult(cl *call, tag pgconn.CommandTag)
	// raiseOnClose makes cl's open results, from a statement that is not a
	// read on cn's primary session, raise the marks once closed, and
	// reports whether there are any (their raise is then theirs).
	raiseOnClose(ctx context.Context, cn *conn, in consistency.Intent, ws sqlclass.Scope, cl *call) bool

	// On a replica.

	// holder returns where the replica connection borrowed for cl is held
	// (b): in the results it will return (rows, a plain query's;
	// checked, a checked query's), or alone. pipelined: it goes after the
	// check; sawPiped: a causal read's bound goes after it.
	holder(cl *call, pipelined, sawPiped bool) (b *borrowed, rows *replicaRows, checked *checkedRows)
	// readOn runs cl on b, a borrowed replica connection, with args; rows
	// are the ones holder returned.
	readOn(ctx context.Context, cl *call, b *borrowed, rows *replicaRows, args []driver.NamedValue) error
	// readSaw runs cl, a query under causal consistency, on b with SawSQL
	// after it in the same round trip; closing its rows records the bound.
	readSaw(ctx context.Context, cn *conn, b *borrowed, cl *call) error
	// checked returns the pipeline that checks the replica's position
	// before cl on pc, and whether the read's result is in pgx's formats;
	// cr holds a database/sql query's rows.
	checked(pc *pgx.Conn, cl *call, cr *checkedRows) (c *pgpipe.Checked, pgxFormats bool)
	// openChecked opens the rows of a checked read whose check passed (c:
	// the read's result is next) and makes them cl's.
	openChecked(pc *pgx.Conn, c *pgpipe.Checked, cr *checkedRows, cl *call) error
	// holds reports whether cl's results hold b, the replica connection
	// they came from, until they are closed (else it is given back now).
	holds(cl *call, b *borrowed) bool

	// whenClosed runs f with their error once cl's open results are
	// closed, and reports whether there are any.
	whenClosed(cl *call, f func(error)) bool
}

// sendAs is how a path sends a call on the session it chose, as far as the
// face needs to know it: decided before the call is sent, by the path.
type sendAs struct {
	// primary: on the primary session, by the primary path (runOnPrimary),
	// where a write must not run twice: a statement is reported as never
	// sent only when nothing went out (pgxCall.on).
	primary bool
	// read: an autocommit read on a session with no state of its own (a
	// replica's, or an unpinned primary session): its rows' session may end
	// after them without failing them (endedAfterRows).
	read bool
	// sent is when (consistency.Now) a statement that raises the marks was
	// sent to the primary: what the marks raised after it say they
	// followed.
	sent time.Time
}

// sqlExec is the database/sql face: its calls come from conn.go, stmt.go
// and tx.go (newSQLCall), and return driver.Rows and driver.Result.
type sqlExec struct{}

// sqlCalls recycles the calls of the database/sql face (newSQLCall). A
// call goes to the heap once a face runs it (the compiler cannot tell what
// an interface's method keeps), and nothing refers to it once its path
// returned: the closures its results run when closed hold what they need,
// not the call (as for pgxQueries).
var sqlCalls = sync.Pool{New: func() any { return new(call) }}

// newSQLCall is a call of the database/sql face that runs t, taken from
// sqlCalls; recycle gives it back.
func newSQLCall(t callText) *call {
	cl := sqlCalls.Get().(*call)
	*cl = call{callText: t, ex: sqlExec{}}
	return cl
}

// recycle gives cl, from newSQLCall, back to sqlCalls, zeroed.
func (cl *call) recycle() {
	*cl = call{}
	sqlCalls.Put(cl)
}

var _ executor = sqlExec{}

func (sqlExec) pipeable(*call, pipelineUse) bool { return true }
func (sqlExec) nameArgs(*call)                   {}
func (sqlExec) once() bool                       { return false }
func (sqlExec) unpinned() bool                   { return false }
func (sqlExec) batched() bool                    { return false }
func (sqlExec) refusal() error                   { return nil }

// run runs cl as stdlib's QueryContext or ExecContext would, keeping the
// command tag an exec's error came with.
func (sqlExec) run(ctx context.Context, cl *call, sc *stdlib.Conn, args []driver.NamedValue, as sendAs) (bool, error) {
	if cl.isQuery {
		rows, err := sc.QueryContext(ctx, cl.query, args)
		if err == nil && as.read {
			// Its session may end after the rows the caller read.
			rows = &endRows{Rows: rows, pc: sc.Conn()}
		}
		cl.rows = rows
		return false, err
	}
	tag, err := pgpipe.ExecPlain(ctx, sc.Conn(), cl.query, args)
	cl.res = driver.RowsAffected(tag.RowsAffected())
	return err != nil && tag.String() == "", err
}

// begin begins cl's transaction with stdlib's BeginTx.
func (sqlExec) begin(ctx context.Context, cl *call, sc *stdlib.Conn) (driver.Tx, error) {
	return sc.BeginTx(ctx, *cl.begin)
}

// queryWrite returns rows that raise the marks once closed (writeRows).
func (sqlExec) queryWrite(ctx context.Context, cn *conn, in consistency.Intent, ws sqlclass.Scope, sc *stdlib.Conn, cl *call) (bool, error) {
	r := &writeRows{cn: cn, sc: sc, ctx: ctx, in: in, ws: ws, host: cn.host}
	if err := r.Rows.Query(ctx, sc.Conn(), cl.query, cn.c.statementArgs(cn.host, cl.args), nil); err != nil {
		return !r.Rows.Answered(), err
	}
	cl.rows = r
	return false, nil
}

// queryPositioned is conn.queryPositioned (INSERT … RETURNING: the
// statement commits once its rows are all sent), or, for a read under
// causal consistency, conn.readSawOnPrimary.
func (sqlExec) queryPositioned(ctx context.Context, cn *conn, in consistency.Intent, ws sqlclass.Scope, sc *stdlib.Conn, cl *call, as sendAs) (bool, error) {
	var err error
	if cl.saw != nil {
		cl.rows, err = cn.readSawOnPrimary(ctx, sc, cl, as.read)
		return err != nil, err // before its first row
	}
	host := cn.host // for the closure: cn's may move on before the rows end
	cl.rows, err = cn.queryPositioned(ctx, sc, cl.query, cl.args, func(pos lagmeter.LSN, werr error) {
		cn.c.raiseOutcome(&in, ws, host, pos, as.sent, werr)
	})
	return err != nil, err // before its first row
}

func (sqlExec) execResult(cl *call, tag pgconn.CommandTag) {
	cl.res = driver.RowsAffected(tag.RowsAffected())
}

// raiseOnClose: a query's rows (writeRows, positioned rows) raise the
// marks themselves once closed.
func (sqlExec) raiseOnClose(_ context.Context, _ *conn, _ consistency.Intent, _ sqlclass.Scope, cl *call) bool {
	return cl.rows != nil
}

// holder: a query's rows hold the connection (one allocation for both),
// an exec's result does not.
func (sqlExec) holder(cl *call, pipelined, sawPiped bool) (*borrowed, *replicaRows, *checkedRows) {
	switch {
	case cl.isQuery && pipelined:
		checked := new(checkedRows)
		return &checked.b, nil, checked
	case cl.isQuery && !sawPiped:
		rows := replicaRowsPool.Get().(*replicaRows)
		return &rows.b, rows, nil
	}
	return new(borrowed), nil, nil
}

func (sqlExec) readOn(ctx context.Context, cl *call, b *borrowed, rows *replicaRows, args []driver.NamedValue) error {
	if rows == nil {
		var err error
		cl.res, err = stdlibExec(ctx, b.conn(), cl.query, args)
		return err
	}
	rows.Rows = pgpipe.Rows{} // a stale statement's second run
	if err := rows.Query(ctx, b.conn(), cl.query, args, nil); err != nil {
		return err
	}
	cl.rows = rows
	return nil
}

func (sqlExec) readSaw(ctx context.Context, cn *conn, b *borrowed, cl *call) error {
	return cn.readSaw(ctx, b, cl)
}

func (sqlExec) checked(_ *pgx.Conn, _ *call, cr *checkedRows) (*pgpipe.Checked, bool) {
	cr.Rows, cr.c = pgpipe.Rows{}, pgpipe.Checked{} // a stale statement's second run
	return &cr.c, false
}

// openChecked opens cr (cl.rows), with the bound to record when they are
// closed under causal consistency. On error the pipeline was finished:
// the error is finishing's, if that failed, else the rows'.
func (sqlExec) openChecked(pc *pgx.Conn, c *pgpipe.Checked, cr *checkedRows, cl *call) error {
	cr.saw = cl.saw
	if err := cr.Rows.Open(pc.TypeMap(), c.RR, nil); err != nil {
		if ferr := c.Finish(); ferr != nil {
			return ferr
		}
		return err
	}
	cl.rows = cr
	return nil
}

func (sqlExec) holds(cl *call, _ *borrowed) bool { return cl.rows != nil }

// whenClosed wraps cl's rows in endRows (or gives f to the endRows a
// primary read's rows already are: sendAs.read).
func (sqlExec) whenClosed(cl *call, f func(error)) bool {
	if cl.rows == nil {
		return false
	}
	if r, ok := cl.rows.(*endRows); ok && r.end == nil {
		r.end = f
		return true
	}
	cl.rows = &endRows{Rows: cl.rows, end: f}
	return true
}
