package pgrouted

import (
	"context"
	"database/sql/driver"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

// This file is what a call of the pgx-native API ([Pool], [PoolConn], a
// Pool's transactions) changes in the driver's paths: the call is routed
// by the same decision and runs on the same connections (a primary
// session, a borrowed replica connection) through the same primary and
// replica paths, but pgx runs it on the connection's *pgx.Conn, and its
// results are pgx's (rows, command tags, batch results), handed to the
// caller as they are, with the bookkeeping of the driver's rows wrappers
// (rows.go) run when they are closed: pgxCall is the pgx face's executor
// (executor.go).

// pgxKind is what a pgx-native call runs.
type pgxKind uint8

const (
	pxExec  pgxKind = iota // Exec
	pxQuery                // Query, QueryRow
	pxBatch                // SendBatch
	pxCopy                 // CopyFrom
	pxBegin                // Begin, BeginTx
)

// pgxCall is the pgx side of a call.
type pgxCall struct {
	kind pgxKind
	args []any // the caller's arguments, pgx options included

	// noPin is set for an autocommit call of the Pool: it leaves no
	// session state for a later call (see Pool), so it does not pin the
	// connection to the primary.
	noPin bool

	tag     pgconn.CommandTag // Exec's
	rows    *poolRows         // Query's, when it succeeded
	rowsBuf *poolRows         // where Query's rows go (see pgxQuery); nil: a new one (a checked read keeps it here)

	// replicaBuf is where a replica connection is borrowed for the call
	// (see pgxQuery); nil: a new one.
	replicaBuf *borrowed
	batch      *pgx.Batch // SendBatch's batch
	br         *poolBatch // and its results

	copyTable pgx.Identifier
	copyCols  []string
	copySrc   pgx.CopyFromSource
	copied    int64

	txOpts pgx.TxOptions
	inner  *pgxTxInner // the transaction begun

	// refused is a replica's refusal (SQLSTATE 25006) of the batch's
	// first statement, read from its results once the batch ran there
	// (poolBatch): the replica path takes it as the answer of the replica
	// it planned, without sending the batch again (refusal).
	refused error

	argBuf [4]driver.NamedValue // the call's args as the driver takes them, when they fit
}

var _ executor = (*pgxCall)(nil)

// pgxOf is the pgx side of cl, a call of the pgx-native API (built by
// execCall, pgxQuery, batchCall, copyCall or beginCall).
func pgxOf(cl *call) *pgxCall { return cl.ex.(*pgxCall) }

// refusal returns the replica's refusal of the call's batch, if any (see
// refused).
func (px *pgxCall) refusal() error { return px.refused }

// run runs cl through pgx on sc's *pgx.Conn (on).
func (px *pgxCall) run(ctx context.Context, cl *call, sc *stdlib.Conn, args []driver.NamedValue, as sendAs) (bool, error) {
	return px.on(ctx, cl, sc.Conn(), args, as)
}

// begin begins the transaction on sc's *pgx.Conn with pgx's BeginTx.
func (px *pgxCall) begin(ctx context.Context, _ *call, sc *stdlib.Conn) (driver.Tx, error) {
	return px.beginOn(ctx, sc.Conn())
}

// queryWrite runs cl as any call: its rows raise the marks once closed
// (raiseOnClose).
func (px *pgxCall) queryWrite(ctx context.Context, cn *conn, _ consistency.Intent, _ sqlclass.Scope, sc *stdlib.Conn, cl *call) (bool, error) {
	return px.on(ctx, cl, sc.Conn(), cn.c.statementArgs(cn.host, cl.args), sendAs{primary: true})
}

// execResult keeps the command tag for Exec, and as the driver's result.
func (px *pgxCall) execResult(cl *call, tag pgconn.CommandTag) {
	cl.res = driver.RowsAffected(tag.RowsAffected())
	px.tag = tag
}

// holder: the call holds the borrowed connection (replicaBuf), or it is
// a new one.
func (px *pgxCall) holder(*call, bool, bool) (*borrowed, *replicaRows, *checkedRows) {
	if b := px.replicaBuf; b != nil {
		*b = borrowed{} // one given back by an attempt on another host
		return b, nil, nil
	}
	return new(borrowed), nil, nil
}

// readOn runs cl through pgx on b's connection.
func (px *pgxCall) readOn(ctx context.Context, cl *call, b *borrowed, _ *replicaRows, args []driver.NamedValue) error {
	_, err := px.on(ctx, cl, b.conn(), args, sendAs{read: true})
	return err
}

// checked starts the rows of a checked Query: pgx's own, over the read's
// result reader once the check passed (openChecked).
func (px *pgxCall) checked(pc *pgx.Conn, _ *call, _ *checkedRows) (*pgpipe.Checked, bool) {
	pr := px.rowsBuf
	if pr == nil {
		pr = new(poolRows)
		px.rowsBuf = pr
	}
	c := new(pgpipe.Checked)
	*pr = poolRows{conn: pc, first: true, checked: c, read: true}
	return c, true
}

// openChecked opens pgx's rows over the checked read's result reader with
// their first row read (px.rows), as on reads it. On error the pipeline
// was finished: the error is finishing's, if that failed, else the rows'.
func (px *pgxCall) openChecked(pc *pgx.Conn, c *pgpipe.Checked, _ *checkedRows, cl *call) error {
	pr := px.rowsBuf
	pr.Rows = pgx.RowsFromResultReader(pc.TypeMap(), c.RR)
	pr.more = pr.Rows.Next()
	if rerr := pr.Rows.Err(); rerr != nil {
		// Failed before its first row, where the replica path can still
		// run it elsewhere.
		pr.Rows.Close()
		if ferr := c.Finish(); ferr != nil {
			return ferr
		}
		return rerr
	}
	pr.saw = cl.saw
	px.rows = pr
	return nil
}

// whenClosed runs f with the rows' or the batch results' error once they
// are closed.
func (px *pgxCall) whenClosed(_ *call, f func(error)) bool {
	if !px.open() {
		return false
	}
	rows, br := px.rows, px.br
	px.afterClose(func() {
		if rows != nil {
			f(rows.Err())
		} else {
			f(br.err)
		}
	})
	return true
}

// on runs cl through pgx on pc, as the path says (as). args are cl.args
// as the driver's path prepared them (Connector.statementArgs): when that
// put pgx's exec mode option in front, pgx gets it too. unanswered: it
// failed before the server answered it (executor.run).
func (px *pgxCall) on(ctx context.Context, cl *call, pc *pgx.Conn, args []driver.NamedValue, as sendAs) (unanswered bool, err error) {
	a := px.args
	if len(args) > len(cl.args) {
		a = append([]any{args[0].Value}, px.args...)
	}
	switch px.kind {
	case pxExec:
		px.tag, err = pc.Exec(ctx, cl.query, a...)
		unanswered = err != nil && px.tag.String() == ""
	case pxQuery:
		var rows pgx.Rows
		if rows, err = pc.Query(ctx, cl.query, a...); err != nil {
			unanswered = true
			break
		}
		// Read the first row now, as stdlib does: a statement that fails
		// before its first row (a replica's refusal, a broken connection)
		// fails here, where the paths can still run it elsewhere.
		more := rows.Next()
		if rerr := rows.Err(); rerr != nil {
			rows.Close()
			return rows.CommandTag().String() == "", rerr
		}
		r := px.rowsBuf
		if r == nil {
			r = new(poolRows)
		}
		*r = poolRows{Rows: rows, first: true, more: more, read: as.read}
		px.rows = r
	case pxBatch:
		px.br = &poolBatch{BatchResults: pc.SendBatch(ctx, px.batch)}
	case pxCopy:
		// Never converted to driver.ErrBadConn: the source may have been
		// read, and cannot be sent again.
		px.copied, err = pc.CopyFrom(ctx, px.copyTable, px.copyCols, px.copySrc)
		return false, err
	}
	if err != nil && pgconn.SafeToRetry(err) && (!as.primary || pgpipe.NothingSent(err)) {
		// Nothing was sent, as stdlib says it (on the primary, where a
		// write must not run twice, as pgpipe.NothingSent says it).
		err = driver.ErrBadConn
	}
	return unanswered, err
}

// beginOn begins the transaction on pc with pgx's BeginTx.
func (px *pgxCall) beginOn(ctx context.Context, pc *pgx.Conn) (driver.Tx, error) {
	t, err := pc.BeginTx(ctx, px.txOpts)
	if err != nil {
		return nil, err
	}
	px.inner = &pgxTxInner{tx: t, ctx: ctx}
	return px.inner, nil
}

// unpinned reports whether a session-state statement of the call leaves
// the connection unpinned (see noPin).
func (px *pgxCall) unpinned() bool { return px.noPin }

// batched reports whether the call is a batch of statements (its text is
// one of them: see batchCall).
func (px *pgxCall) batched() bool { return px.kind == pxBatch }

// once reports whether the call may not run a second time: CopyFrom's
// source is read as it is sent.
func (px *pgxCall) once() bool { return px.kind == pxCopy }

// pipeable: a checked read is a Query; a positioned write an Exec, whose
// command tag the pipeline gives, or a Query, whose rows pgx reads from
// the pipelined statement's reader (queryPositioned); pgx's batches and
// copies are pgx's own, and so is a call in a transaction (it gets pgx's
// own rows, and a stale refusal aborts the transaction as it does in
// pgx).
func (px *pgxCall) pipeable(_ *call, use pipelineUse) bool {
	switch use {
	case pipeChecked:
		return px.kind == pxQuery
	case pipePositioned:
		return px.kind == pxExec || px.kind == pxQuery
	}
	return false
}

// nameArgs gives a Query its arguments as the driver's paths take them
// (see namedArgs), for a statement that may be pipelined: only then, so
// that a read sent alone does not build them.
func (px *pgxCall) nameArgs(cl *call) {
	if px.kind == pxQuery && cl.args == nil {
		cl.args = namedArgs(px.args, px.argBuf[:])
	}
}

// open reports whether the call left results open (rows, batch results).
func (px *pgxCall) open() bool { return px.rows != nil || px.br != nil }

// onClose is what happens once the call's open results are closed.
func (px *pgxCall) onClose() *onClose {
	if px.rows != nil {
		return &px.rows.onClose
	}
	return &px.br.onClose
}

// afterClose runs f once the call's open results are closed.
func (px *pgxCall) afterClose(f func()) {
	o := px.onClose()
	if o.after == nil {
		o.after = o.afterBuf[:0]
	}
	o.after = append(o.after, f)
}

// holds makes the call's open results keep the borrowed replica
// connection b until they are closed, and reports whether there are any.
func (px *pgxCall) holds(_ *call, b *borrowed) bool {
	if !px.open() {
		return false
	}
	px.onClose().replica = b
	return true
}

// putOnClose puts the Pool's connection cn the call ran on back once its
// open results are closed (see Pool.put).
func (px *pgxCall) putOnClose(p *Pool, cn *conn) {
	o := px.onClose()
	o.pool, o.cn = p, cn
}

// raiseOnClose raises the read-your-writes marks once the call's open
// results, from a statement that is not a read on cn's primary session,
// are closed (conn.raiseAfterRows, as the driver's writeRows do), and
// reports whether there are any. A write whose primary's term ended while
// its rows, its batch's results or its commit's answer were on their way
// ends with ErrOutcomeUnknown from them too (resultErr).
func (px *pgxCall) raiseOnClose(ctx context.Context, cn *conn, in consistency.Intent, ws sqlclass.Scope, _ *call) bool {
	if !px.open() {
		return false
	}
	host, sc := cn.host, cn.primary
	px.afterClose(func() { cn.raiseAfterRows(ctx, &in, ws, host) })
	if sc != nil {
		// Err is read once the rows are closed, and the connection given
		// back to its pool, which may have closed its session or opened
		// another since: the session's own term is asked.
		t := cn.term
		errFn := func(err error) error { return resultErr(err, t, sc) }
		if px.rows != nil {
			px.rows.errFn = errFn
		} else {
			px.br.errFn = errFn
		}
	}
	return true
}

// queryPositioned is conn.queryPositioned for a Query of the pgx-native
// API (pool.go): its rows are pgx's own (pgx.RowsFromResultReader, in the
// result formats pgx asks for), whose first row is read at once as
// pgxCall.on reads it, and the position after the commit is read when
// they are closed (positionedRows.finish), before anything else their
// closing runs (the Pool's release of the connection).
func (px *pgxCall) queryPositioned(ctx context.Context, cn *conn, in consistency.Intent, ws sqlclass.Scope, sc *stdlib.Conn, cl *call, as sendAs) (bool, error) {
	pc := sc.Conn()
	both := &struct {
		r poolRows
		w positionedRows
	}{r: poolRows{conn: pc, first: true, read: as.read}}
	r, w := &both.r, &both.w
	r.positioned = w
	if err := w.p.Start(ctx, pc, cn.descsOf(), cn.c.stmtsOf(cn.host, pc), cl.query, cl.args, true); err != nil {
		return true, err
	}
	w.cn, w.term, w.sc, w.in, w.ws, w.host, w.sent, w.saw = cn, cn.term, sc, in, ws, cn.host, as.sent, cl.saw
	r.Rows = pgx.RowsFromResultReader(pc.TypeMap(), w.p.RR)
	r.more = r.Rows.Next()
	if r.Rows.Err() != nil {
		r.Rows.Close()
		// Failed before its first row: answered only if a command tag came.
		unanswered := !r.more && r.Rows.CommandTag().String() == ""
		return unanswered, w.finish()
	}
	px.rows = r
	return false, nil
}

// readSaw runs cl, a pgx Query of the Pool under causal consistency,
// on b, a borrowed replica connection, with SawSQL after it in the same
// round trip: its rows are pgx's own (pgx.RowsFromResultReader, in the
// result formats pgx asks for), whose first row is read at once as
// pgxCall.on reads it; closing them records the bound.
func (px *pgxCall) readSaw(ctx context.Context, cn *conn, b *borrowed, cl *call) error {
	pc := b.conn()
	w := &sawPending{saw: cl.saw}
	if err := w.p.StartRead(ctx, pc, &b.h.descs, cn.c.stmtsOf(b.h, pc), cl.query, cl.args, true); err != nil {
		return err
	}
	pr := px.rowsBuf
	if pr == nil {
		pr = new(poolRows)
	}
	*pr = poolRows{conn: pc, first: true, sawn: w, read: true}
	pr.Rows = pgx.RowsFromResultReader(pc.TypeMap(), w.p.RR)
	pr.more = pr.Rows.Next()
	if rerr := pr.Rows.Err(); rerr != nil {
		// Failed before its first row, where the replica path can still
		// run it elsewhere.
		pr.Rows.Close()
		w.finish(pr.more)
		return rerr
	}
	px.rows = pr
	return nil
}

// pgxTxInner is a pgx transaction as the driver's tx holds it
// (driver.Tx); ctx is the context of the Commit or Rollback being run.
type pgxTxInner struct {
	tx  pgx.Tx
	ctx context.Context
}

// Commit implements driver.Tx.
func (t *pgxTxInner) Commit() error { return t.tx.Commit(t.ctx) }

// Rollback implements driver.Tx.
func (t *pgxTxInner) Rollback() error { return t.tx.Rollback(t.ctx) }

// namedArgs returns args as the driver's paths take them (the positioned
// write encodes them, pipelines looks at the first), in buf when they
// fit.
func namedArgs(args []any, buf []driver.NamedValue) []driver.NamedValue {
	if len(args) == 0 {
		return nil
	}
	nv := buf[:0]
	if cap(nv) < len(args) {
		nv = make([]driver.NamedValue, 0, len(args))
	}
	for i, a := range args {
		nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: a})
	}
	return nv
}

// execCall, batchCall and copyCall build the calls of the pgx-native API
// (a Query's and a QueryRow's: pgxQuery).
func execCall(query string, args []any) *call {
	cl := newPgxCall(call{callText: callText{query: query}}, pgxCall{kind: pxExec, args: args})
	cl.args = namedArgs(args, pgxOf(cl).argBuf[:])
	return cl
}

// pgxQuery is a Query's or a QueryRow's call, the call's pgx side, its
// rows and the replica connection it borrows, in one piece taken from
// pgxQueries. QueryRow gives it back once its row is scanned; Query as
// soon as the call returns, its rows and borrowed connection being in a
// queryResults of their own (rows may be read after they are closed).
type pgxQuery struct {
	cl      call
	px      pgxCall
	rows    poolRows
	replica borrowed
}

// queryResults is what a Query's results keep once its call is over:
// the rows, and the replica connection they hold until closed.
type queryResults struct {
	rows    poolRows
	replica borrowed
}

// init makes q, a zero pgxQuery, the Query of query with args.
func (q *pgxQuery) init(query string, args []any) *pgxQuery {
	q.px = pgxCall{kind: pxQuery, args: args, rowsBuf: &q.rows, replicaBuf: &q.replica}
	q.cl = call{callText: callText{query: query, isQuery: true}, ex: &q.px}
	return q
}

// pgxQueries recycles the pgxQuery of Query and QueryRow (most of the
// bytes a read allocates). Nothing refers to a call once it returned (the
// closures its results run when closed hold the connection, not the call;
// its arguments were encoded when sent), and a QueryRow's rows are closed
// by its Scan, after which nothing refers to them either (the replica
// connection given back, the Pool's connection put back, the call
// reported). The caller keeps the poolRow, which is not recycled: a second
// Scan finds the first one's outcome.
var pgxQueries = sync.Pool{New: func() any { return new(pgxQuery) }}

// recycle gives q back to pgxQueries, zeroed.
func (q *pgxQuery) recycle() {
	*q = pgxQuery{}
	pgxQueries.Put(q)
}

// newPgxCall returns cl with its pgx side px, allocated together.
func newPgxCall(cl call, px pgxCall) *call {
	both := &struct {
		cl call
		px pgxCall
	}{cl, px}
	both.cl.ex = &both.px
	return &both.cl
}

// batchCall's text, which the decision classifies, is the batch's most
// dangerous statement (the first of them): any statement that must run on
// the primary sends the batch there, one that forces the primary with a
// comment too; a batch of reads may run on a replica, and a leading
// comment of its first statement routes it.
func batchCall(c *Connector, ctx context.Context, b *pgx.Batch) *call {
	text, rank := "", -1
	for _, q := range b.QueuedQueries {
		var r sqlclass.Result
		c.classify(ctx, q.SQL, &r)
		k := 2 * r.Class.Rank()
		if r.Class == sqlclass.Read && r.Hint == sqlclass.HintPrimary {
			k = 1 // over any read, under any other statement
		}
		if k > rank {
			text, rank = q.SQL, k
		}
	}
	return &call{callText: callText{query: text}, ex: &pgxCall{kind: pxBatch, batch: b}}
}

// copyCall's text is the COPY statement pgx sends.
func copyCall(table pgx.Identifier, cols []string, src pgx.CopyFromSource) *call {
	quoted := make([]string, len(cols))
	for i, col := range cols {
		quoted[i] = pgx.Identifier{col}.Sanitize()
	}
	q := "COPY " + table.Sanitize() + " (" + strings.Join(quoted, ", ") + ") FROM STDIN BINARY"
	return &call{callText: callText{query: q}, ex: &pgxCall{kind: pxCopy, copyTable: table, copyCols: cols, copySrc: src}}
}

// beginCall is the BEGIN of a transaction with opts.
func beginCall(opts pgx.TxOptions) *call {
	return &call{callText: callText{kind: callBegin, query: "BEGIN", begin: &driver.TxOptions{ReadOnly: opts.AccessMode == pgx.ReadOnly}}, ex: &pgxCall{kind: pxBegin, txOpts: opts}}
}
