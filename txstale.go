package pgrouted

import (
	"context"
	"database/sql/driver"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

// This file is the recovery from stale statements inside a transaction. A
// migration made by another process (a column added or retyped, a table
// dropped and created again) makes the server refuse a statement whose
// description was cached before it, before running it; inside a
// transaction that refusal would abort the transaction, for a change the
// application did not make.
//
// So inside a transaction a statement that answers like a query (a read,
// a locking read, an INSERT, UPDATE, DELETE or MERGE) runs through a pgconn
// pipeline with a cached description (pgpipe.Descs), as the pipelined paths
// outside transactions do, instead of pgx's named statements. Its first
// run in the transaction, when its description comes from the cache, goes
// between a savepoint and its release, in the same round trip:
//
//	SAVEPOINT pgrouted_stale; <statement>; RELEASE SAVEPOINT pgrouted_stale; Sync
//
// When the server refuses it as stale (staleStatement, staleParams), the
// transaction is rolled back to the savepoint, which undoes nothing else
// (the statement did not run), the description is dropped, and the
// statement is described afresh and sent again.
//
// The transaction's first statement needs no savepoint: before it nothing
// ran in the transaction but its BEGIN, so when the server refuses it as
// stale the transaction is rolled back and begun again with the same
// options (tx.restart), which loses nothing, and the statement described
// afresh and sent again. So a transaction sends the server what pgx sends
// for it unless one of its later statements has a cached description. A statement that ran in the
// transaction holds its relations' locks until the transaction ends, so no
// other session can change them meanwhile: its later runs, and those of a
// statement described inside the transaction, go without the savepoint. A
// statement of the transaction itself that may change the schema or the
// session's name resolution (DDL, SET search_path) makes every statement
// be checked again, with descriptions of the transaction's own.
//
// Statements that answer otherwise (DDL, COPY, transaction control,
// several in one string), those without arguments whose rows are not
// wanted (pgx sends them with the simple protocol, which caches nothing),
// and those sent the way the user chose (the simple protocol, pgx options
// among the arguments) keep pgx's own path.

// maxGuards bounds the savepoints of one transaction. A savepoint whose
// statement writes takes a subtransaction ID, kept until the transaction
// ends, and past 64 of them every snapshot of the server looks them up in
// pg_subtrans (subtransaction overflow), replicas included: the statements
// after the bound run unguarded, as they did without this recovery.
const maxGuards = 32

// txStale is a transaction's state for the recovery from stale
// statements.
type txStale struct {
	// checked are the statements that ran in the transaction since it
	// last changed the schema.
	checked map[string]struct{}
	// guards counts the savepoints sent.
	guards int
	// sent: a statement was sent in the transaction (its first one needs
	// no savepoint).
	sent bool
	// own are the descriptions read since the transaction changed the
	// schema or its session's settings: valid only inside it.
	own *pgpipe.Descs
}

// descs returns the statement descriptions valid in the transaction.
func (t *tx) descs() *pgpipe.Descs {
	switch {
	case t.stale.own != nil:
		return t.stale.own
	case t.replica != nil:
		return &t.replica.h.descs
	}
	return t.cn.descsOf()
}

// exec runs cl, classified as r, in the transaction on its connection sc.
// recovered reports that the server refused it as stale first, and that
// it ran again after the savepoint's rollback.
func (t *tx) exec(ctx context.Context, sc *stdlib.Conn, r sqlclass.Result, cl *call) (recovered bool, err error) {
	first := !t.stale.sent
	t.stale.sent = true
	plain := r.Statements == 1 && !r.ChangesCatalog && (r.DML || r.Class == sqlclass.Read || r.Class == sqlclass.Lock)
	if plain && t.cn.c.pipelines(t.host, cl, pipeTx) {
		recovered, err = t.runPipelined(ctx, sc, cl, true, first)
		if err == nil {
			if t.stale.checked == nil {
				t.stale.checked = make(map[string]struct{})
			}
			t.stale.checked[cl.query] = struct{}{}
		}
		return recovered, err
	}
	// No path runs a statement of a transaction again, whatever its error
	// says (sendAs.primary is the primary path's).
	_, err = cl.ex.run(ctx, cl, sc, t.cn.c.statementArgs(t.host, cl.args), sendAs{})
	if !plain {
		// It may have changed the schema, or what its names mean: every
		// statement is checked again, with descriptions of the
		// transaction's own.
		t.stale.checked = nil
		if r.ChangesCatalog || r.Has(sqlclass.Session) || r.Class == sqlclass.Unknown {
			t.stale.own = new(pgpipe.Descs)
		}
		if r.Has(sqlclass.Session) {
			// See runOnPrimary.
			pgpipe.InvalidateAll(sc.Conn().PgConn())
		}
	}
	return false, err
}

// runPipelined sends cl on sc in a pipeline, with its description from the
// transaction's descriptions; between a savepoint and its release when the
// description came from the cache and the statement did not run in the
// transaction yet (and mayGuard), unless it is the transaction's first
// (first). A stale refusal of a guarded statement is rolled back to the
// savepoint, one of the first statement ends the transaction, which is
// begun again; then the statement is described and sent again.
func (t *tx) runPipelined(ctx context.Context, sc *stdlib.Conn, cl *call, mayGuard, first bool) (recovered bool, err error) {
	pc := sc.Conn()
	if pc.IsClosed() {
		return false, driver.ErrBadConn
	}
	descs := t.descs()
	_, ran := t.stale.checked[cl.query]
	guard := mayGuard && !ran && t.stale.guards < maxGuards && descs.Get(cl.query) != nil
	restart := guard && first && t.begin != nil
	if restart {
		guard = false
	}
	e, err := pgpipe.Encode(ctx, pc, descs, t.cn.c.stmtsOf(t.host, pc), cl.query, cl.args, cl.isQuery)
	if err != nil {
		return false, err
	}
	if guard {
		t.stale.guards++
	}
	var res driver.Result
	cl.rows, res, err = pgpipe.SendGuarded(ctx, pc, &e, guard, cl.isQuery)
	if res != nil {
		cl.res = res
	}
	if err == nil || !(guard || restart) || !(staleStatement(err) || staleParams(err)) || pc.IsClosed() {
		if pgpipe.IsPgError(err) {
			descs.Drop(cl.query)
		}
		return false, err
	}
	// Refused before it ran: back to the savepoint, or to a new
	// transaction, and again, freshly described (an error of the statement
	// itself comes back then, and aborts the transaction as it would have).
	if guard {
		if rerr := pgpipe.RollbackGuard(ctx, pc.PgConn()); rerr != nil {
			return false, err
		}
	} else if rerr := t.restart(sc); rerr != nil {
		return false, err
	}
	t.cn.dropStale(cl.query)
	descs.Drop(cl.query)
	_, err = t.runPipelined(ctx, sc, cl, false, false)
	return true, err
}

// restart ends the transaction, which its first statement's refusal
// aborted, and begins it again on sc with its options, in its context:
// nothing but its BEGIN had run in it. After an error the transaction is
// not open on the server: its Commit fails.
func (t *tx) restart(sc *stdlib.Conn) error {
	if err := t.inner.Rollback(); err != nil {
		return err
	}
	inner, err := sc.BeginTx(t.ctx, *t.begin)
	if err != nil {
		return err
	}
	t.inner = inner
	return nil
}
