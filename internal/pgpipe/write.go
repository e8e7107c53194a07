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

// SawSQL reads, after a read and in its round trip, an upper bound of the
// WAL position the read's snapshot held (causal consistency). On a standby
// it is the later of the WAL received and flushed by its walreceiver
// (pg_last_wal_receive_lsn) and the WAL replayed (pg_last_wal_replay_lsn):
// the startup process replays only WAL the walreceiver has flushed, and a
// record's commit becomes visible while it is being replayed, before the
// replay position passes the record's end; the receive position is past
// it already. On a server that is not in recovery (the primary, or a
// standby promoted under the read) it is the WAL insert position, at or
// past every commit any snapshot taken before could hold. NULL (neither is
// known: a standby that never streamed) reads as no bound.
const SawSQL = "SELECT (CASE WHEN pg_is_in_recovery() THEN greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()) ELSE pg_current_wal_insert_lsn() END)::text"

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
	return exec(ctx, pc, descs, st, query, args, InsertPositionSQL)
}

// ExecRead is Exec for a read (causal consistency): the query after it,
// in the same round trip, is SawSQL, and pos the upper bound of what the
// read saw (0 when it failed or the bound could not be read).
func ExecRead(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, query string, args []driver.NamedValue) (tag pgconn.CommandTag, pos lagmeter.LSN, err error) {
	return exec(ctx, pc, descs, st, query, args, SawSQL)
}

// exec is Exec with posSQL as the query read after the statement.
func exec(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, query string, args []driver.NamedValue, posSQL string) (tag pgconn.CommandTag, pos lagmeter.LSN, err error) {
	s := scratchOf(pc.PgConn())
	e, err := encode(ctx, pc, descs, st, query, args, noRows, s)
	if err != nil {
		return tag, 0, err
	}
	tag, pos, err = execEncoded(ctx, pc, st, &e, s, posSQL)
	if IsPgError(err) {
		descs.Drop(query)
	}
	return tag, pos, err
}

// execEncoded is Exec for a statement encoded, s the connection's
// scratch: without a pipeline when nothing has to be prepared first
// (direct.go).
func execEncoded(ctx context.Context, pc *pgx.Conn, st *Stmts, e *Encoded, s *scratch, posSQL string) (tag pgconn.CommandTag, pos lagmeter.LSN, err error) {
	pe := fixed(st, posSQL)
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
// its rows stream to the caller, and at their end (Next, see Rows.Next),
// or once they are closed before it, the commit's outcome and the position
// after it are read from the same round trip and handed to done. wrap, when not nil, makes the error the
// rows and done see from an error of the connection (see Rows.nextErr).
func Query(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, query string, args []driver.NamedValue, wrap func(error) error, done func(lagmeter.LSN, error)) (driver.Rows, error) {
	return queryWith(ctx, pc, descs, st, query, args, wrap, done, InsertPositionSQL, false)
}

// QueryRead is Query for a read (causal consistency): done gets the upper
// bound of what the read saw (posSQL's answer: SawSQL on a standby,
// InsertPositionSQL on the primary; read in the same round trip at the
// rows' end or once they are closed; 0 when it could not be read) and the
// read's outcome. Rows that came whole are not failed by what went wrong
// after them (the bound's read, the session's end): that leaves the bound
// unknown, not the read failed.
func QueryRead(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, query string, args []driver.NamedValue, posSQL string, done func(lagmeter.LSN, error)) (driver.Rows, error) {
	return queryWith(ctx, pc, descs, st, query, args, nil, done, posSQL, true)
}

// queryWith is Query with posSQL as the query read after the statement,
// for a read (QueryRead) or not.
func queryWith(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, query string, args []driver.NamedValue, wrap func(error) error, done func(lagmeter.LSN, error), posSQL string, read bool) (driver.Rows, error) {
	p := new(Pending)
	err := p.start(ctx, pc, descs, st, query, args, false, posSQL)
	if err != nil {
		return nil, err
	}
	if wrap == nil {
		wrap = func(err error) error { return err }
	}
	rows, err := NewRows(pc.TypeMap(), p.RR, func(rerr error) error {
		pos, sent, ferr := p.Finish(rerr)
		if !sent {
			return ferr
		}
		ferr = wrap(ferr)
		done(pos, ferr)
		if read && rerr == nil {
			return nil // whole: see QueryRead
		}
		return ferr
	})
	if err == nil {
		rows.(*Rows).nextErr = wrap
	}
	return rows, err
}

// Pending is a statement that returns rows (INSERT … RETURNING), sent
// with the read of the WAL insert position after its commit in one round
// trip (StartQuery): its rows are read from RR, and once RR is closed,
// Finish reads the rest.
type Pending struct {
	// RR reads the statement's rows.
	RR *pgconn.ResultReader

	ctx   context.Context
	pc    *pgconn.PgConn
	pl    *pgconn.Pipeline // nil: sent without a pipeline (direct.go)
	pe    Encoded          // the position query
	descs *Descs
	st    *Stmts
	query string
}

// StartQuery sends query with args on pc in autocommit mode, and the read
// of the position after its commit, as Query does; its rows are in
// stdlib's result formats, or pgx's with pgxFormats (for pgx's rows,
// pgx.RowsFromResultReader). An error is the statement's, before any row:
// nothing more is to be read.
func StartQuery(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, query string, args []driver.NamedValue, pgxFormats bool) (*Pending, error) {
	p := new(Pending)
	if err := p.Start(ctx, pc, descs, st, query, args, pgxFormats); err != nil {
		return nil, err
	}
	return p, nil
}

// Start is StartQuery into p, a zero Pending (one the caller holds inside
// its own, say).
func (p *Pending) Start(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, query string, args []driver.NamedValue, pgxFormats bool) error {
	return p.start(ctx, pc, descs, st, query, args, pgxFormats, InsertPositionSQL)
}

// StartRead is Start for a read (causal consistency): what Finish reads
// after it is SawSQL's bound of what the read saw.
func (p *Pending) StartRead(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, query string, args []driver.NamedValue, pgxFormats bool) error {
	return p.start(ctx, pc, descs, st, query, args, pgxFormats, SawSQL)
}

// start is Start with posSQL as the query read after the statement.
func (p *Pending) start(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, query string, args []driver.NamedValue, pgxFormats bool, posSQL string) error {
	s := scratchOf(pc.PgConn())
	results := stdlibRows
	if pgxFormats {
		results = pgxRows
	}
	e, err := encode(ctx, pc, descs, st, query, args, results, s)
	if err != nil {
		return err
	}
	*p = Pending{ctx: ctx, pc: pc.PgConn(), pe: fixed(st, posSQL), descs: descs, st: st, query: query}
	if direct(ctx, p.pc, &e, &p.pe) {
		p.RR, err = startDirect(ctx, p.pc, s, &e, &p.pe)
		return err
	}
	pl, err := startPositioned(ctx, pc, &e, &p.pe)
	if err != nil {
		return err
	}
	rr, err := e.Next(pl)
	if err != nil {
		if IsPgError(err) {
			descs.Drop(query)
		}
		if serr := FinishSync(pl, err); serr != nil {
			err = serr
		}
		finishPositioned(pl, &p.pe, err)
		return err
	}
	p.pl, p.RR = pl, rr
	return nil
}

// Finish reads what follows the statement once RR was closed with rerr
// (its rows' outcome): the statement's Sync (without a pipeline, closing
// RR read it), then the position query's answer. It returns the position
// after the commit (0 when the statement failed or the position could not
// be read) and the statement's outcome, as Exec's; sent is false when
// nothing was sent (a write that failed before its first byte went out, as
// a pipeline's Flush reports it): there is no outcome to report.
func (p *Pending) Finish(rerr error) (pos lagmeter.LSN, sent bool, err error) {
	invalidateOn(p.st, p.query, rerr)
	if p.pl != nil {
		if serr := FinishSync(p.pl, rerr); serr != nil && rerr == nil {
			rerr = serr
		}
		pos, rerr = finishPositioned(p.pl, &p.pe, rerr)
	} else {
		if rerr != nil && !IsPgError(rerr) && pgconn.SafeToRetry(rerr) {
			return 0, false, rerr
		}
		if rerr == nil || IsPgError(rerr) {
			pos = readPosition(p.ctx, p.pc)
		}
		if rerr != nil {
			pos = 0
		}
	}
	if IsPgError(rerr) {
		p.descs.Drop(p.query)
	}
	return pos, true, rerr
}

// Commit commits pc's transaction and reads the WAL position after the
// commit in the same round trip (with st, both named statements). It mirrors pgx's Tx.Commit: a transaction
// the server had to roll back gives pgx.ErrTxCommitRollback, and a
// connection left inside a transaction after an error is closed.
func Commit(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts) (lagmeter.LSN, error) {
	e := fixed(st, "COMMIT")
	tag, pos, err := execEncoded(ctx, pc, st, &e, scratchOf(pc.PgConn()), InsertPositionSQL)
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
