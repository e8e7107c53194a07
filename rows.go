package pgrouted

import (
	"context"
	"database/sql/driver"
	"sync"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

// This file holds the driver.Rows wrappers, which finish a statement's
// bookkeeping when the caller closes them. Rows read from a pipeline are
// pgpipe.Rows (internal/pgpipe).

// replicaRows are the rows of an autocommit database/sql query on a
// borrowed replica connection (pgpipe.Rows.Query, with stdlib's
// conversions and column types), which goes back to its pool when they are
// closed. The rows and the borrowed connection are one piece, taken from
// replicaRowsPool and given back to it by Close.
type replicaRows struct {
	pgpipe.Rows
	b borrowed
}

// replicaRowsPool recycles replicaRows (most of the bytes a replica read
// allocates). database/sql closes a driver.Rows once and never touches it
// again; nothing in pgrouted keeps one (cl.rows is the caller's from the
// moment the statement returns, and a replica path that fails gives its
// rows back at once, unseen).
var replicaRowsPool = sync.Pool{New: func() any { return new(replicaRows) }}

// recycle gives r, which nothing refers to any more, back to
// replicaRowsPool, zeroed. A nil r does nothing.
func (r *replicaRows) recycle() {
	if r != nil {
		*r = replicaRows{}
		replicaRowsPool.Put(r)
	}
}

// Close implements driver.Rows. database/sql calls it once.
func (r *replicaRows) Close() error {
	err := r.Rows.Close()
	r.b.giveBack()
	r.recycle()
	return err
}

// checkedRows are the rows of an autocommit database/sql query on a
// borrowed replica connection, sent after the check of the replica's
// position in one round trip (readChecked): the rows, the pipeline they
// are read from and the borrowed connection, which goes back to its pool
// once they are closed, are one allocation.
type checkedRows struct {
	pgpipe.Rows
	c pgpipe.Checked
	b borrowed
}

// Close implements driver.Rows: the read's outcome, or the connection's
// error after it.
func (r *checkedRows) Close() error {
	r.Rows.Close()
	err := r.c.Finish()
	r.b.giveBack()
	return err
}

// writeRows are the rows of an autocommit statement that wrote on the
// primary (pgpipe.Rows.Query, as stdlib's QueryContext runs it): closing
// them raises the read-your-writes marks (conn.raiseAfterRows).
type writeRows struct {
	pgpipe.Rows
	cn   *conn
	sc   *stdlib.Conn // the primary session the rows come from
	ctx  context.Context
	in   consistency.Intent // the statement's plan's (a copy: the plan is on its caller's stack)
	ws   sqlclass.Scope     // the relations it wrote
	host *host
	done bool
}

// Next implements driver.Rows.
func (r *writeRows) Next(dest []driver.Value) error {
	return resultErr(r.Rows.Next(dest), r.cn.term, r.sc)
}

// Close implements driver.Rows.
func (r *writeRows) Close() error {
	err := resultErr(r.Rows.Close(), r.cn.term, r.sc)
	if !r.done {
		r.done = true
		r.cn.raiseAfterRows(r.ctx, &r.in, r.ws, r.host)
	}
	return err
}
