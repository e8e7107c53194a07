package pgrouted

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// poolTx is a transaction of the pgx-native API: the driver's transaction
// (tx.go) on a primary session or a borrowed replica connection, begun
// and ended by pgx. Its statements run on that connection, reported as
// the driver's are; Commit raises the read-your-writes marks.
type poolTx struct {
	t     *tx
	inner *pgxTxInner
	// release gives the Pool's connection back once the transaction
	// ended; nil for one begun on a PoolConn, which keeps it.
	release func(error)
	owner   *PoolConn // the PoolConn it was begun on, if any
	done    bool
	sp      int64 // savepoints begun
}

// run runs a statement inside the transaction, and returns its outcome.
func (pt *poolTx) run(ctx context.Context, cl *call) (outcome, error) {
	if pt.done {
		return outcome{}, pgx.ErrTxClosed
	}
	if pt.owner != nil {
		pt.owner.note(ctx, cl)
	}
	return pt.t.cn.runAfter(ctx, cl, outcome{})
}

// end releases the connection after Commit or Rollback.
func (pt *poolTx) end(err error) {
	if pt.release != nil {
		pt.release(err)
	}
}

// Commit implements pgx.Tx.
func (pt *poolTx) Commit(ctx context.Context) error {
	if pt.done {
		return pgx.ErrTxClosed
	}
	pt.done = true
	pt.inner.ctx, pt.t.ctx = ctx, ctx
	err := pt.t.Commit()
	pt.end(err)
	return err
}

// Rollback implements pgx.Tx. After Commit it returns pgx.ErrTxClosed, so
// that a deferred Rollback is harmless.
func (pt *poolTx) Rollback(ctx context.Context) error {
	if pt.done {
		return pgx.ErrTxClosed
	}
	pt.done = true
	pt.inner.ctx, pt.t.ctx = ctx, ctx
	err := pt.t.Rollback()
	pt.end(err)
	return err
}

// Begin implements pgx.Tx: a savepoint, named as pgx names it.
func (pt *poolTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if pt.done {
		return nil, pgx.ErrTxClosed
	}
	pt.sp++
	name := "sp_" + strconv.FormatInt(pt.sp, 10)
	if _, err := pt.Exec(ctx, "savepoint "+name); err != nil {
		return nil, err
	}
	return &poolSavepoint{tx: pt, name: name}, nil
}

// Exec implements pgx.Tx.
func (pt *poolTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return execOn(ctx, pt.run, sql, args)
}

// Query implements pgx.Tx.
func (pt *poolTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return queryOn(ctx, pt.run, sql, args)
}

// QueryRow implements pgx.Tx.
func (pt *poolTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return queryRowOn(ctx, pt.run, sql, args)
}

// SendBatch implements pgx.Tx.
func (pt *poolTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return sendBatchOn(ctx, pt.t.cn.c, pt.run, b, false)
}

// CopyFrom implements pgx.Tx.
func (pt *poolTx) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	return copyFromOn(ctx, pt.run, tableName, columnNames, rowSrc)
}

// Prepare implements pgx.Tx: on the transaction's connection.
func (pt *poolTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if pt.done {
		return nil, pgx.ErrTxClosed
	}
	return pt.inner.tx.Prepare(ctx, name, sql)
}

// LargeObjects implements pgx.Tx: on the transaction's connection.
func (pt *poolTx) LargeObjects() pgx.LargeObjects { return pt.inner.tx.LargeObjects() }

// Conn implements pgx.Tx: the transaction's connection (a primary
// session, or a replica's for a read-only transaction there).
func (pt *poolTx) Conn() *pgx.Conn { return pt.inner.tx.Conn() }

// poolSavepoint is a savepoint inside a poolTx, as pgx's: its statements
// run in the transaction.
type poolSavepoint struct {
	tx     *poolTx
	name   string
	closed bool
}

// Begin implements pgx.Tx: a nested savepoint.
func (sp *poolSavepoint) Begin(ctx context.Context) (pgx.Tx, error) {
	if sp.closed {
		return nil, pgx.ErrTxClosed
	}
	return sp.tx.Begin(ctx)
}

// Commit implements pgx.Tx: RELEASE SAVEPOINT.
func (sp *poolSavepoint) Commit(ctx context.Context) error {
	return sp.end(ctx, "release savepoint ")
}

// Rollback implements pgx.Tx: ROLLBACK TO SAVEPOINT.
func (sp *poolSavepoint) Rollback(ctx context.Context) error {
	return sp.end(ctx, "rollback to savepoint ")
}

func (sp *poolSavepoint) end(ctx context.Context, verb string) error {
	if sp.closed {
		return pgx.ErrTxClosed
	}
	_, err := sp.tx.Exec(ctx, verb+sp.name)
	sp.closed = true
	return err
}

// Exec implements pgx.Tx.
func (sp *poolSavepoint) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if sp.closed {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return sp.tx.Exec(ctx, sql, args...)
}

// Query implements pgx.Tx.
func (sp *poolSavepoint) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if sp.closed {
		return errRows{pgx.ErrTxClosed}, pgx.ErrTxClosed
	}
	return sp.tx.Query(ctx, sql, args...)
}

// QueryRow implements pgx.Tx.
func (sp *poolSavepoint) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if sp.closed {
		return &poolRow{err: pgx.ErrTxClosed}
	}
	return sp.tx.QueryRow(ctx, sql, args...)
}

// SendBatch implements pgx.Tx.
func (sp *poolSavepoint) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if sp.closed {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	return sp.tx.SendBatch(ctx, b)
}

// CopyFrom implements pgx.Tx.
func (sp *poolSavepoint) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	if sp.closed {
		return 0, pgx.ErrTxClosed
	}
	return sp.tx.CopyFrom(ctx, tableName, columnNames, rowSrc)
}

// Prepare implements pgx.Tx.
func (sp *poolSavepoint) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if sp.closed {
		return nil, pgx.ErrTxClosed
	}
	return sp.tx.Prepare(ctx, name, sql)
}

// LargeObjects implements pgx.Tx.
func (sp *poolSavepoint) LargeObjects() pgx.LargeObjects { return sp.tx.LargeObjects() }

// Conn implements pgx.Tx.
func (sp *poolSavepoint) Conn() *pgx.Conn { return sp.tx.Conn() }

var (
	_ pgx.Tx = (*poolTx)(nil)
	_ pgx.Tx = (*poolSavepoint)(nil)
)
