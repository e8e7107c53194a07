package pgrouted

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
)

// This file holds the results of the pgx-native API: pgx's own rows and
// batch results, with what must happen when they are closed (a replica
// connection given back, the read-your-writes marks raised after a write, the Pool's
// connection released: onClose).

// poolRows are pgx's rows of a query, whose first row was read already
// (pgxCall.on): the first Next returns it. Like pgx's (and pgxpool's),
// they close themselves when Next returns false, and then run after.
type poolRows struct {
	pgx.Rows
	conn        *pgx.Conn // the connection, for rows without one (pgx.RowsFromResultReader); nil: Rows.Conn()
	first, more bool      // the first row is read; whether there was one
	closed      bool
	// read: the rows of an autocommit read on a session with no state of
	// its own (sendAs.read): its session may end after the rows the caller
	// read without failing them (endedAfterRows). atEnd: Next reached
	// their end (closed without it, the caller stopped early); ended:
	// Close found their connection closed, before giving it back.
	read, atEnd, ended bool
	onClose
	errFn func(error) error // what Err returns for the query's error

	// positioned is set for the rows of a positioned write: Close reads
	// the position after it first, and Err says the lost error
	// (pgxCall.queryPositioned); finished is the statement's outcome that
	// reading found (its commit's failure after the rows: a deferred
	// constraint), which Err reports as pgx's rows report theirs.
	positioned *positionedRows
	finished   error

	// checked is set for the rows of a read sent after its replica's
	// position check (readChecked): Close ends the pipeline, and Err says
	// the connection's error after the read.
	//
	// Both are pointers: a plain read's rows (in every Query's pgxQuery)
	// would otherwise carry half a kilobyte they do not use.
	checked *pgpipe.Checked
	// saw is set for a checked read under causal consistency: Close
	// records the bound read after it. sawn is a read under causal
	// consistency sent without a check (pgxCall.readSaw).
	saw  *sawBy
	sawn *sawPending
}

// onClose is what happens once a call's open results (rows, batch results)
// are closed, in this order: the borrowed replica connection they hold is
// given back, the functions in after run (the watermark raised after a
// write), and the Pool's connection the call ran on is put back. Fields
// rather than closures: a read allocates none of them.
type onClose struct {
	replica  *borrowed
	after    []func()
	afterBuf [2]func() // after's first ones, without an allocation
	pool     *Pool
	cn       *conn
}

// run runs the hooks once.
func (o *onClose) run() {
	if b := o.replica; b != nil {
		o.replica = nil
		b.giveBack()
	}
	for _, f := range o.after {
		f()
	}
	o.after = nil
	if p := o.pool; p != nil {
		o.pool = nil
		p.put(o.cn, nil)
		o.cn = nil
	}
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
		r.atEnd = true
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
	if r.positioned != nil {
		r.finished = r.positioned.finish()
	}
	if r.checked != nil {
		err := r.checked.Finish()
		r.saw.sawOutcome(r.checked.Saw, true, err)
	}
	if r.sawn != nil {
		r.sawn.finish(true)
	}
	if r.read {
		// Before the connection goes back: then it may be another's.
		r.ended = r.Conn().IsClosed()
	}
	r.onClose.run()
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
	if r.positioned != nil {
		if err == nil {
			err = r.finished // resultErr's already (positionedRows.finish)
		} else {
			err = resultErr(err, r.positioned.term, r.positioned.sc)
		}
		if !r.read {
			return err
		}
		// A read under causal consistency on the primary: see below.
	}
	// Whole: closed early, or a checked read whose result ended (its
	// command tag read) before the Sync's error.
	whole := !r.atEnd || (r.checked != nil && err == nil)
	if err == nil && r.checked != nil {
		err = r.checked.Err()
	}
	if r.read && r.closed && endedAfterRows(err, r.ended, whole) {
		err = nil
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
	// q is the query the rows belong to, given back to pgxQueries once
	// they are scanned (nil: nothing to give back).
	q *pgxQuery
}

// Scan implements pgx.Row: pgx.ErrNoRows when the query returned none.
// A second Scan returns the first one's error, or pgx.ErrNoRows, as
// pgx's rows do once closed.
func (r *poolRow) Scan(dest ...any) (err error) {
	if r.err != nil {
		return r.err
	}
	if r.rows == nil {
		return pgx.ErrNoRows
	}
	rows := r.rows
	defer func() {
		rows.Close()
		r.rows = nil
		if err != nil {
			r.err = err
		}
		if q := r.q; q != nil {
			r.q = nil
			q.recycle()
		}
	}()
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
//
// With rerun (an autocommit batch that ran on a replica, see sendBatch),
// the results are read through poolBatch's own methods, the callbacks of
// the batch's queued queries included (Close runs them as pgx's does, with
// poolBatch as their BatchResults): when a result is the replica's refusal
// (SQLSTATE 25006), the replica's results end there, and the statements
// from the refused one on run again as a new batch (rerun), whose results
// the rest of the reads take.
type poolBatch struct {
	pgx.BatchResults
	closed bool
	err    error
	onClose

	batch *pgx.Batch
	next  int // the index in batch of the next result read
	rerun func(rest []*pgx.QueuedQuery, refusal error) pgx.BatchResults

	errFn func(error) error // when set, what the results' errors become
}

// errOf is err as the results report it (errFn).
func (b *poolBatch) errOf(err error) error {
	if b.errFn == nil {
		return err
	}
	return b.errFn(err)
}

// Exec implements pgx.BatchResults.
func (b *poolBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.Exec()
	if b.refusedAt(err) {
		tag, err = b.BatchResults.Exec()
	}
	b.next++
	return tag, b.errOf(err)
}

// Query implements pgx.BatchResults. On a replica, the first row is read
// at once (as Pool.Query does): a refusal comes before it.
func (b *poolBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	if err == nil && b.rerun != nil {
		more := rows.Next()
		if rerr := rows.Err(); rerr != nil {
			rows.Close()
			err = rerr
		} else {
			rows = &poolRows{Rows: rows, first: true, more: more}
		}
	}
	if b.refusedAt(err) {
		rows, err = b.BatchResults.Query()
	}
	b.next++
	if err != nil {
		err = b.errOf(err)
		return errRows{err}, err
	}
	if b.errFn != nil {
		rows = &poolRows{Rows: rows, first: false, errFn: b.errFn}
	}
	return rows, nil
}

// QueryRow implements pgx.BatchResults.
func (b *poolBatch) QueryRow() pgx.Row {
	rows, err := b.Query()
	return &poolRow{rows: rows, err: err}
}

// refusedAt reports whether err, the result of the batch's statement
// b.next, is a replica's refusal that made the statements from that one
// on run again: b's results are then theirs.
func (b *poolBatch) refusedAt(err error) bool {
	if b.rerun == nil || !readOnly25006(err) || b.next >= len(b.batch.QueuedQueries) {
		return false
	}
	rerun := b.rerun
	b.rerun = nil
	b.BatchResults.Close() // the replica's batch ended with the refusal
	b.onClose.run()
	b.BatchResults = rerun(b.batch.QueuedQueries[b.next:], err)
	return true
}

// Close implements pgx.BatchResults.
func (b *poolBatch) Close() error {
	if b.closed {
		return b.err
	}
	b.closed = true
	if b.batch != nil {
		// Read the remaining results through b, running their callbacks
		// as pgx's Close does, until one fails; then discard the rest
		// (pgx's Close would run their callbacks).
		q := b.batch.QueuedQueries
		for b.err == nil && b.next < len(q) {
			i := b.next
			if fn := q[i].Fn; fn != nil {
				b.err = fn(b)
			} else {
				_, b.err = b.Exec()
			}
			if b.next == i && b.err == nil {
				_, b.err = b.Exec() // a callback that read nothing
			}
		}
		for ; b.next < len(q); b.next++ {
			b.BatchResults.Exec()
		}
	}
	err := b.BatchResults.Close()
	if b.err == nil {
		b.err = b.errOf(err)
	}
	b.onClose.run()
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
