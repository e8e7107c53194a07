package pgpipe

// This file is a statement sent inside a transaction through a pipeline,
// optionally between a savepoint and its release, so that a refusal of a
// stale description can be rolled back to the savepoint instead of
// aborting the transaction:
//
//	SAVEPOINT pgrouted_stale; <statement>; RELEASE SAVEPOINT pgrouted_stale; Sync

import (
	"context"
	"database/sql/driver"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The savepoint's statements.
const (
	savepointSQL  = "SAVEPOINT pgrouted_stale"
	releaseSQL    = "RELEASE SAVEPOINT pgrouted_stale"
	rollbackToSQL = "ROLLBACK TO SAVEPOINT pgrouted_stale; RELEASE SAVEPOINT pgrouted_stale"
)

// SendGuarded sends e on pc, inside a transaction, in a pipeline: between
// a savepoint and its release when guard. With rows (a query), the rows
// stream to the caller and the rest is read when they are closed; without,
// res is the statement's result.
func SendGuarded(ctx context.Context, pc *pgx.Conn, e *Encoded, guard, rows bool) (dr driver.Rows, res driver.Result, err error) {
	pl := pc.PgConn().StartPipeline(ctx)
	if guard {
		pl.SendQueryParams(savepointSQL, nil, nil, nil, nil)
	}
	e.Send(pl)
	if guard {
		pl.SendQueryParams(releaseSQL, nil, nil, nil, nil)
	}
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		pl.Close()
		return nil, nil, err
	}
	return answerGuarded(pc, pl, guard, rows)
}

// answerGuarded reads the answers of a pipeline SendGuarded sent: the
// savepoint's when guard, then the statement's, the release's and the
// Sync.
func answerGuarded(pc *pgx.Conn, pl *pgconn.Pipeline, guard, rows bool) (driver.Rows, driver.Result, error) {
	if guard {
		rr, err := NextResult(pl)
		if err == nil {
			_, err = rr.Close()
		}
		if err != nil {
			return nil, nil, finishGuarded(pl, false, err)
		}
	}
	rr, err := NextResult(pl)
	if err != nil {
		return nil, nil, finishGuarded(pl, guard, err)
	}
	if rows {
		dr, err := NewRows(pc.TypeMap(), rr, func(rerr error) error {
			return finishGuarded(pl, guard, rerr)
		})
		return dr, nil, err
	}
	var res driver.Result
	tag, err := rr.Close()
	if err == nil {
		res = driver.RowsAffected(tag.RowsAffected())
	}
	return nil, res, finishGuarded(pl, guard, err)
}

// finishGuarded reads what follows a statement whose outcome was err in a
// pipeline of SendGuarded (the release when guard and the statement
// succeeded, then the Sync; after an error the server skipped the
// release), and closes the pipeline.
func finishGuarded(pl *pgconn.Pipeline, guard bool, err error) error {
	if err == nil && guard {
		_, err = Result(pl, nil)
	} else if serr := FinishSync(pl, err); serr != nil && err == nil {
		err = serr
	}
	if cerr := pl.Close(); cerr != nil && err == nil && !IsPgError(cerr) {
		err = cerr
	}
	return err
}

// RollbackGuard rolls the transaction on pc back to the savepoint of a
// guarded statement the server refused, and releases the savepoint.
func RollbackGuard(ctx context.Context, pc *pgconn.PgConn) error {
	_, err := pc.Exec(ctx, rollbackToSQL).ReadAll()
	return err
}
