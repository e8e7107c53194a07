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
// a savepoint and its release when guard. A named statement (see Encode)
// is prepared inside the transaction, and stays prepared whatever becomes
// of it (prepared statements are not transactional). With rows (a query),
// the rows stream to the caller and the rest is read at their end, or when
// they are closed before it; without, res is the statement's result.
func SendGuarded(ctx context.Context, pc *pgx.Conn, e *Encoded, guard, rows bool) (dr driver.Rows, res driver.Result, err error) {
	var g *guardStmts
	if guard {
		g = &guardStmts{fixed(e.st, savepointSQL), fixed(e.st, releaseSQL)}
	}
	pl := pc.PgConn().StartPipeline(ctx)
	if g != nil {
		g.savepoint.Send(pl)
	}
	e.Send(pl)
	if g != nil {
		g.release.Send(pl)
	}
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		pl.Close()
		return nil, nil, err
	}
	return answerGuarded(pc, pl, e, g, rows)
}

// guardStmts are a guard's savepoint and release, named as the statement
// they guard.
type guardStmts struct{ savepoint, release Encoded }

// answerGuarded reads the answers of a pipeline SendGuarded sent: the
// savepoint's with g, then the statement's, the release's and the
// Sync.
func answerGuarded(pc *pgx.Conn, pl *pgconn.Pipeline, e *Encoded, g *guardStmts, rows bool) (driver.Rows, driver.Result, error) {
	if g != nil {
		rr, err := g.savepoint.Next(pl)
		if err == nil {
			_, err = rr.Close()
			g.savepoint.failed(err)
		}
		if err != nil {
			return nil, nil, finishGuarded(pl, nil, err)
		}
	}
	rr, err := e.Next(pl)
	if err != nil {
		return nil, nil, finishGuarded(pl, g, err)
	}
	if rows {
		st, query := e.st, e.query
		dr, err := NewRows(pc.TypeMap(), rr, func(rerr error) error {
			invalidateOn(st, query, rerr)
			return finishGuarded(pl, g, rerr)
		})
		return dr, nil, err
	}
	var res driver.Result
	tag, err := rr.Close()
	e.failed(err)
	if err == nil {
		res = driver.RowsAffected(tag.RowsAffected())
	}
	return nil, res, finishGuarded(pl, g, err)
}

// finishGuarded reads what follows a statement whose outcome was err in a
// pipeline of SendGuarded (the release of g when the statement
// succeeded, then the Sync; after an error the server skipped the
// release), and closes the pipeline.
func finishGuarded(pl *pgconn.Pipeline, g *guardStmts, err error) error {
	if err == nil && g != nil {
		_, err = resultOf(pl, &g.release, nil)
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
