package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// insertPositionSQL reads the primary's WAL insert position. Read after a
// commit, it is at or after that commit's record.
const insertPositionSQL = "SELECT pg_current_wal_insert_lsn()::text"

// maxDescriptions bounds the statement descriptions a primary session keeps
// for pipelined writes; past it the cache starts over.
const maxDescriptions = 256

// positioned reports whether a statement about to run on the primary session
// in autocommit mode can run pipelined with the read of the WAL position
// that follows its commit (see execPositioned): one INSERT, UPDATE, DELETE,
// MERGE or data-modifying WITH (not COPY, DDL, CALL or DO, which the
// ordinary path runs as pgx does), an exec (no rows to stream), under
// session consistency, with pgx's default extended-protocol modes and no pgx
// option among its arguments.
func (cn *conn) positioned(r sqlclass.Result, cl *call) bool {
	if cl.isQuery || !r.DML || cn.c.cfg.Consistency != dsn.ConsistencySession || cn.inSQLTx() {
		return false
	}
	switch cn.c.hosts[cn.host].ConnConfig.DefaultQueryExecMode {
	case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe:
	default:
		// The user chose how statements are sent (simple protocol, exec
		// without describe): keep it, at the price of a round trip.
		return false
	}
	if len(cl.args) > 0 {
		switch cl.args[0].Value.(type) {
		case pgx.QueryExecMode, pgx.QueryRewriter, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
			return false
		}
	}
	return true
}

// execPositioned runs one statement on the primary session in autocommit
// mode and reads the WAL insert position after its commit, in one round
// trip: a pipeline of the statement, a Sync (which commits its implicit
// transaction), the position query and a second Sync. Arguments are encoded
// as pgx does for a described statement (QueryExecModeCacheDescribe); the
// description of a statement is read once per session.
//
// pos is 0 when the statement failed (nothing committed) or the position
// could not be read.
func (cn *conn) execPositioned(ctx context.Context, sc *stdlib.Conn, query string, args []driver.NamedValue) (tag pgconn.CommandTag, pos lagmeter.LSN, err error) {
	pc := sc.Conn()
	var oids []uint32
	cn.eqb.ParamValues, cn.eqb.ParamFormats, cn.eqb.ResultFormats = cn.eqb.ParamValues[:0], cn.eqb.ParamFormats[:0], cn.eqb.ResultFormats[:0]
	if len(args) > 0 {
		sd := cn.descs[query]
		if sd == nil {
			if sd, err = pc.PgConn().Prepare(ctx, "", query, nil); err != nil {
				return tag, 0, err
			}
			if len(cn.descs) >= maxDescriptions || cn.descs == nil {
				cn.descs = make(map[string]*pgconn.StatementDescription)
			}
			cn.descs[query] = sd
		}
		vals := make([]any, len(args))
		for i, a := range args {
			vals[i] = a.Value
		}
		if err := cn.eqb.Build(pc.TypeMap(), sd, vals); err != nil {
			return tag, 0, err
		}
		oids = sd.ParamOIDs
	}
	pl := pc.PgConn().StartPipeline(ctx)
	pl.SendQueryParams(query, cn.eqb.ParamValues, oids, cn.eqb.ParamFormats, cn.eqb.ResultFormats)
	pl.SendPipelineSync()
	pl.SendQueryParams(insertPositionSQL, nil, nil, nil, nil)
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		pl.Close()
		return tag, 0, err
	}
	tag, err = pipelinedResult(pl, nil)
	var text string
	if err == nil || isPgError(err) {
		_, perr := pipelinedResult(pl, &text)
		if !isPgError(perr) && perr != nil && err == nil {
			err = perr
		}
	}
	if cerr := pl.Close(); err == nil && cerr != nil && !isPgError(cerr) {
		err = cerr
	}
	if err != nil {
		if isPgError(err) {
			// The statement may no longer match its description (a
			// column changed type): describe it again next time.
			delete(cn.descs, query)
		}
		return tag, 0, err
	}
	pos, _ = lagmeter.ParseLSN(text)
	return tag, pos, nil
}

// pipelinedResult reads one query and the Sync after it from pl: the
// query's command tag or error and, with into, its first column's text.
func pipelinedResult(pl *pgconn.Pipeline, into *string) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	res, err := pl.GetResults()
	if err == nil {
		rr, ok := res.(*pgconn.ResultReader)
		if !ok {
			return tag, errors.New("pgrouted: pipeline: unexpected result")
		}
		for rr.NextRow() {
			if v := rr.Values(); into != nil && len(v) > 0 && v[0] != nil {
				*into = string(v[0])
			}
		}
		tag, err = rr.Close()
	}
	if err != nil && !isPgError(err) {
		return tag, err // the connection broke
	}
	res, serr := pl.GetResults()
	if serr != nil && !isPgError(serr) {
		return tag, serr
	}
	if _, ok := res.(*pgconn.PipelineSync); !ok && serr == nil {
		return tag, errors.New("pgrouted: pipeline: expected a sync")
	}
	if err == nil {
		err = serr
	}
	return tag, err
}

func isPgError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}

// commitPositioned commits the primary session's transaction and reads the
// WAL position after the commit in the same round trip. It mirrors pgx's
// Tx.Commit: a transaction the server had to roll back gives
// pgx.ErrTxCommitRollback, and a session left inside a transaction after an
// error is closed.
func (cn *conn) commitPositioned(ctx context.Context) (lagmeter.LSN, error) {
	sc := cn.primary
	tag, pos, err := cn.execPositioned(ctx, sc, "COMMIT", nil)
	if err != nil {
		if sc.Conn().PgConn().TxStatus() != 'I' {
			_ = sc.Conn().Close(ctx)
		}
		return 0, err
	}
	if tag.String() == "ROLLBACK" {
		return 0, pgx.ErrTxCommitRollback
	}
	return pos, nil
}
