package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"sync"

	"github.com/jackc/pgx/v5"
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
	if endedAfterRows(err, r.b.conn().IsClosed(), r.Rows.Early()) {
		err = nil
	}
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
	c   pgpipe.Checked
	b   borrowed
	saw *sawBy // causal consistency: the bound read after it is recorded
}

// Close implements driver.Rows: the read's outcome, or the connection's
// error after it.
func (r *checkedRows) Close() error {
	rerr := r.Rows.Close()
	err := r.c.Finish()
	r.saw.sawOutcome(r.c.Saw, true, err)
	// Whole: the caller stopped reading early, or the read's result
	// ended (its command tag came) before the error, at the Sync.
	if endedAfterRows(err, r.b.conn().IsClosed(), rerr == nil || r.Rows.Early()) {
		err = nil
	}
	r.b.giveBack()
	return err
}

// sawRows are the rows of a read under causal consistency on a borrowed
// replica connection, whose bound is read after it in the same round trip
// (conn.readSaw, pgpipe.QueryRead): the bound is recorded at their end or
// when they are closed (pgpipe's done), and then the connection goes back
// to its pool.
type sawRows struct {
	*pgpipe.Rows
	b *borrowed
}

// Close implements driver.Rows: the session's end after the rows the
// caller read does not fail them (endedAfterRows; a failure after rows
// that came whole is not the read's at all: pgpipe.QueryRead).
func (r *sawRows) Close() error {
	err := r.Rows.Close()
	if endedAfterRows(err, r.b.conn().IsClosed(), r.Rows.Early()) {
		err = nil
	}
	r.b.giveBack()
	return err
}

var _ driver.Rows = (*sawRows)(nil)

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

// endedAfterRows reports whether err, the error of closing the rows of an
// autocommit read on a session with no state of its own (sendAs.read), is
// only that session ending after everything the caller read: whole, the
// caller stopped reading before the rows' end (as database/sql's Row.Scan
// and pgx's QueryRow do after the first row), or the read's result ended,
// its command tag read, before the error; and closed, the connection was
// closed with it (a shutdown's or pg_terminate_backend's FATAL, 57P01, or
// the connection lost), as seen before the connection was given back (a
// connection given back may be another caller's already). Every row the
// caller read is whole, and a read has nothing to commit: the error is not
// the read's, and the closed connection is not used again. A fast shutdown
// ends the sessions of every read in flight, some just after they answered
// (one read in two hundred that a pg_terminate_backend ended, measured on
// PostgreSQL 15), which failed there before. Rows read to their end and cut
// by the error are not whole (rows may be missing), nor is an error that
// leaves the connection open (a later row's), nor the caller's own
// cancellation.
func endedAfterRows(err error, closed, whole bool) bool {
	return err != nil && whole && closed &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// endRows are a query's rows with what happens at their end: when
// Config.OnStart asked to be told when the statement ends
// (Connector.endOnClose), Close tells end, once, with the first error Next
// returned, else Close's; for the stdlib rows of an autocommit read on an
// unpinned primary session (pc, see sendAs.read), the session's end after
// the rows the caller read does not fail them (endedAfterRows). They
// answer for the column types what the rows they wrap answer, and what
// database/sql assumes of rows that do not say when those do not.
type endRows struct {
	driver.Rows
	err error // Next's first error but io.EOF
	end func(error)
	pc  *pgx.Conn // the read's connection, or nil
	eof bool      // Next returned io.EOF
}

// Next implements driver.Rows.
func (r *endRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err == io.EOF {
		r.eof = true
	} else if err != nil && r.err == nil {
		r.err = err
	}
	return err
}

// Close implements driver.Rows.
func (r *endRows) Close() error {
	err := r.Rows.Close()
	if r.pc != nil && r.err == nil && endedAfterRows(err, r.pc.IsClosed(), !r.eof) {
		err = nil
	}
	if end := r.end; end != nil {
		r.end = nil
		if r.err != nil {
			end(r.err)
		} else {
			end(err)
		}
	}
	return err
}

// ColumnTypeDatabaseTypeName implements driver.RowsColumnTypeDatabaseTypeName.
func (r *endRows) ColumnTypeDatabaseTypeName(index int) string {
	if t, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(index)
	}
	return ""
}

// ColumnTypeLength implements driver.RowsColumnTypeLength.
func (r *endRows) ColumnTypeLength(index int) (int64, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return t.ColumnTypeLength(index)
	}
	return 0, false
}

// ColumnTypePrecisionScale implements driver.RowsColumnTypePrecisionScale.
func (r *endRows) ColumnTypePrecisionScale(index int) (int64, int64, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return t.ColumnTypePrecisionScale(index)
	}
	return 0, 0, false
}

// ColumnTypeScanType implements driver.RowsColumnTypeScanType.
func (r *endRows) ColumnTypeScanType(index int) reflect.Type {
	if t, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(index)
	}
	return reflect.TypeFor[any]()
}

// ColumnTypeNullable implements driver.RowsColumnTypeNullable.
func (r *endRows) ColumnTypeNullable(index int) (nullable, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(index)
	}
	return false, false
}

var (
	_ driver.RowsColumnTypeDatabaseTypeName = (*endRows)(nil)
	_ driver.RowsColumnTypeLength           = (*endRows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*endRows)(nil)
	_ driver.RowsColumnTypeScanType         = (*endRows)(nil)
	_ driver.RowsColumnTypeNullable         = (*endRows)(nil)
)
