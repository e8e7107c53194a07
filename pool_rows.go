package pgrouted

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// This file holds the results of the pgx-native API: pgx's own rows and
// batch results, with what must happen when they are closed (a replica
// connection given back, the watermark raised after a write, the Pool's
// connection released).

// poolRows are pgx's rows of a query, whose first row was read already
// (pgxCall.on): the first Next returns it. Like pgx's (and pgxpool's),
// they close themselves when Next returns false, and then run after.
type poolRows struct {
	pgx.Rows
	conn        *pgx.Conn // the connection, for rows without one (pgx.RowsFromResultReader); nil: Rows.Conn()
	first, more bool      // the first row is read; whether there was one
	closed      bool
	after       []func()          // run once, when closed
	afterBuf    [2]func()         // after's first ones, without an allocation
	errFn       func(error) error // what Err returns for the query's error

	// positioned is set (its reader not nil) for the rows of a
	// positioned write: Close reads the position after it first, and
	// Err says the lost error (queryPositionedPgx).
	positioned positionedRows
}

// Next implements pgx.Rows.
func (r *poolRows) Next() bool {
	if r.closed {
		return false
	}
	ok := r.more
	if r.first {
		r.first = false
	} else {
		ok = r.Rows.Next()
	}
	if !ok {
		r.Close()
	}
	return ok
}

// Close implements pgx.Rows.
func (r *poolRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	if r.positioned.p.RR != nil {
		r.positioned.finish()
	}
	for _, f := range r.after {
		f()
	}
	r.after = nil
}

// Conn implements pgx.Rows: the connection the rows are read from, as
// pgx's own rows give it.
func (r *poolRows) Conn() *pgx.Conn {
	if r.conn != nil {
		return r.conn
	}
	return r.Rows.Conn()
}

// Err implements pgx.Rows.
func (r *poolRows) Err() error {
	err := r.Rows.Err()
	if r.positioned.p.RR != nil {
		return r.positioned.lostErr(err)
	}
	if r.errFn != nil {
		return r.errFn(err)
	}
	return err
}

// poolRow is QueryRow's pgx.Row: pgx's connRow.Scan over poolRows.
type poolRow struct {
	rows pgx.Rows
	err  error
}

// Scan implements pgx.Row: pgx.ErrNoRows when the query returned none.
func (r *poolRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	rows := r.rows
	defer rows.Close()
	for _, d := range dest {
		if _, ok := d.(*pgtype.DriverBytes); ok {
			return fmt.Errorf("cannot scan into *pgtype.DriverBytes from QueryRow")
		}
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// poolBatch are pgx's results of a batch; Close runs after.
type poolBatch struct {
	pgx.BatchResults
	closed bool
	err    error
	after  []func()
}

// Close implements pgx.BatchResults.
func (b *poolBatch) Close() error {
	if b.closed {
		return b.err
	}
	b.closed = true
	b.err = b.BatchResults.Close()
	for _, f := range b.after {
		f()
	}
	b.after = nil
	return b.err
}

// errRows are closed rows with an error: what Query returns with its
// error, as pgx's Query does.
type errRows struct{ err error }

func (r errRows) Close()                                       {}
func (r errRows) Err() error                                   { return r.err }
func (r errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r errRows) Next() bool                                   { return false }
func (r errRows) Scan(...any) error                            { return r.err }
func (r errRows) Values() ([]any, error)                       { return nil, r.err }
func (r errRows) RawValues() [][]byte                          { return nil }
func (r errRows) Conn() *pgx.Conn                              { return nil }
func (r errRows) TypeMap() *pgtype.Map                         { return nil }

var (
	_ pgx.Rows         = (*poolRows)(nil)
	_ pgx.Row          = (*poolRow)(nil)
	_ pgx.BatchResults = (*poolBatch)(nil)
	_ pgx.Rows         = errRows{}
)
