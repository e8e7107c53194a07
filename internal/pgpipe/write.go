package pgpipe

// This file is the positioned write: one statement in autocommit mode and
// the read of the WAL insert position after its commit, in one round trip
// (a pipeline of the statement, a Sync that commits its implicit
// transaction, the position query and a second Sync).

import (
	"context"
	"database/sql/driver"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// InsertPositionSQL reads the primary's WAL insert position. Read after a
// commit was acknowledged, it is at or past that commit.
const InsertPositionSQL = "SELECT pg_current_wal_insert_lsn()::text"

// Exec runs query with args on pc in autocommit mode and reads the WAL
// insert position after its commit, in one round trip, with the
// statement's description from descs (see Encode). With st (pc's named
// statements, see StmtsOf), the statement and the position query are
// named prepared statements, prepared once on the connection.
//
// pos is 0 when the statement failed (nothing committed) or the position
// could not be read. A statement the server refused has its description
// dropped: it may no longer match (a column changed type).
func Exec(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, query string, args []driver.NamedValue) (tag pgconn.CommandTag, pos lagmeter.LSN, err error) {
	s := scratchOf(pc.PgConn())
	e, err := encode(ctx, pc, descs, st, query, args, false, s)
	if err != nil {
		return tag, 0, err
	}
	tag, pos, err = execEncoded(ctx, pc, st, &e, s)
	if IsPgError(err) {
		descs.Drop(query)
	}
	return tag, pos, err
}

// execEncoded is Exec for a statement encoded, s the connection's
// scratch: without a pipeline when nothing has to be prepared first
// (direct.go).
func execEncoded(ctx context.Context, pc *pgx.Conn, st *Stmts, e *Encoded, s *scratch) (tag pgconn.CommandTag, pos lagmeter.LSN, err error) {
	pe := fixed(st, InsertPositionSQL)
	if direct(ctx, pc.PgConn(), e, &pe) {
		return execDirect(ctx, pc.PgConn(), s, e, &pe)
	}
	pl, err := startPositioned(ctx, pc, e, &pe)
	if err != nil {
		return tag, 0, err
	}
	tag, err = resultOf(pl, e, nil)
	pos, err = finishPositioned(pl, &pe, err)
	return tag, pos, err
}

// execDirect is execEncoded without a pipeline (direct.go), with the
// same outcome: err nil means the server answered the statement's Sync
// (it committed), and a position that cannot be read after that leaves
// pos 0 (see finishPositioned).
func execDirect(ctx context.Context, pc *pgconn.PgConn, s *scratch, e, pe *Encoded) (tag pgconn.CommandTag, pos lagmeter.LSN, err error) {
	rr, err := startDirect(ctx, pc, s, e, pe)
	if err != nil {
		return tag, 0, err
	}
	tag, err = rr.Close()
	e.failed(err)
	if err != nil && !IsPgError(err) {
		return tag, 0, err // the connection broke: pgconn closed it
	}
	pos = readPosition(ctx, pc)
	if err != nil {
		return tag, 0, err
	}
	return tag, pos, nil
}

// fixed is a statement without parameters and whose rows, if any, are
// read as text (the position query, COMMIT, the savepoint's), named with
// st.
func fixed(st *Stmts, query string) Encoded {
	e := Encoded{query: query}
	if st != nil {
		st.name(&e)
	}
	return e
}

// startPositioned sends e and the position query pe, each followed by a
// Sync, in a pipeline on pc.
func startPositioned(ctx context.Context, pc *pgx.Conn, e, pe *Encoded) (*pgconn.Pipeline, error) {
	pl := pc.PgConn().StartPipeline(ctx)
	e.Send(pl)
	pl.SendPipelineSync()
	pe.Send(pl)
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		pl.Close()
		return nil, err
	}
	return pl, nil
}

// finishPositioned reads the position query pe and its Sync after a
// statement whose outcome was err, and ends the pipeline. pos is 0 when err is not
// nil, and when the position could not be read.
//
// err nil means the server answered the statement's Sync: it committed.
// A position query that fails after that (the connection broke, or the
// caller closed it) does not make the statement fail: it succeeded, at a
// position nobody read (pos 0). The broken connection is found closed at
// its next use.
func finishPositioned(pl *pgconn.Pipeline, pe *Encoded, err error) (lagmeter.LSN, error) {
	var text string
	if err == nil || IsPgError(err) {
		if _, perr := resultOf(pl, pe, &text); perr != nil {
			text = ""
		}
	}
	pl.Close()
	if err != nil {
		return 0, err
	}
	pos, _ := lagmeter.ParseLSN(text)
	return pos, nil
}

// Query is Exec for a statement that returns rows (INSERT … RETURNING):
// its rows stream to the caller, and once they are closed the position
// after the commit is read from the same pipeline and handed to done with
// the statement's outcome. wrap, when not nil, makes the error the rows
// and done see from an error of the connection (see Rows.nextErr).
func Query(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, query string, args []driver.NamedValue, wrap func(error) error, done func(lagmeter.LSN, error)) (driver.Rows, error) {
	s := scratchOf(pc.PgConn())
	e, err := encode(ctx, pc, descs, st, query, args, true, s)
	if err != nil {
		return nil, err
	}
	if wrap == nil {
		wrap = func(err error) error { return err }
	}
	pe := fixed(st, InsertPositionSQL)
	if direct(ctx, pc.PgConn(), &e, &pe) {
		return queryDirect(ctx, pc, descs, s, &e, &pe, wrap, done)
	}
	pl, err := startPositioned(ctx, pc, &e, &pe)
	if err != nil {
		return nil, err
	}
	rr, err := e.Next(pl)
	if err != nil {
		if IsPgError(err) {
			descs.Drop(query)
		}
		if serr := FinishSync(pl, err); serr != nil {
			err = serr
		}
		finishPositioned(pl, &pe, err)
		return nil, err
	}
	rows, err := NewRows(pc.TypeMap(), rr, func(rerr error) error {
		invalidateOn(st, query, rerr)
		if serr := FinishSync(pl, rerr); serr != nil && rerr == nil {
			rerr = serr
		}
		pos, perr := finishPositioned(pl, &pe, rerr)
		if rerr == nil && perr != nil {
			rerr = perr
		}
		if IsPgError(rerr) {
			descs.Drop(query)
		}
		rerr = wrap(rerr)
		done(pos, rerr)
		return rerr
	})
	if err == nil {
		rows.(*Rows).nextErr = wrap
	}
	return rows, err
}

// queryDirect is Query without a pipeline (direct.go), with the same
// outcome. The statement's ReadyForQuery is read when its reader is
// closed (by Next at the end of the rows, or by Close), the position's
// answer after it, by Close.
func queryDirect(ctx context.Context, pc *pgx.Conn, descs *Descs, s *scratch, e, pe *Encoded, wrap func(error) error, done func(lagmeter.LSN, error)) (driver.Rows, error) {
	pgc := pc.PgConn()
	rr, err := startDirect(ctx, pgc, s, e, pe)
	if err != nil {
		return nil, err
	}
	st, query := e.st, e.query
	rows, err := NewRows(pc.TypeMap(), rr, func(rerr error) error {
		invalidateOn(st, query, rerr)
		if rerr != nil && !IsPgError(rerr) && pgconn.SafeToRetry(rerr) {
			// Nothing was sent (the write failed before a byte went
			// out), as a pipeline's Flush reports it.
			return rerr
		}
		var pos lagmeter.LSN
		if rerr == nil || IsPgError(rerr) {
			pos = readPosition(ctx, pgc)
		}
		if rerr != nil {
			pos = 0
		}
		if IsPgError(rerr) {
			descs.Drop(query)
		}
		rerr = wrap(rerr)
		done(pos, rerr)
		return rerr
	})
	if err == nil {
		rows.(*Rows).nextErr = wrap
	}
	return rows, err
}

// Commit commits pc's transaction and reads the WAL position after the
// commit in the same round trip (with st, both named statements). It mirrors pgx's Tx.Commit: a transaction
// the server had to roll back gives pgx.ErrTxCommitRollback, and a
// connection left inside a transaction after an error is closed.
func Commit(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts) (lagmeter.LSN, error) {
	e := fixed(st, "COMMIT")
	tag, pos, err := execEncoded(ctx, pc, st, &e, scratchOf(pc.PgConn()))
	if err != nil {
		if pc.PgConn().TxStatus() != 'I' {
			_ = pc.Close(ctx)
		}
		return 0, err
	}
	if tag.String() == "ROLLBACK" {
		return 0, pgx.ErrTxCommitRollback
	}
	return pos, nil
}
