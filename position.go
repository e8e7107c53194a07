package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"

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
// ordinary path runs as pgx does), under session consistency, with pgx's default extended-protocol modes and no pgx
// option among its arguments.
func (cn *conn) positioned(r sqlclass.Result, cl *call) bool {
	if !r.DML || cn.c.cfg.Consistency != dsn.ConsistencySession || cn.inSQLTx() {
		return false
	}
	return cn.c.pipelineOK(cn.host, cl.args)
}

// pipelineOK reports whether a statement with args for host may be sent
// through a pgconn pipeline, encoded as pgx does for a described statement:
// not when the user chose how statements are sent (the simple protocol,
// exec without describe) in the connection string or with a pgx option
// among the arguments. Those keep pgx's own path, at the price of a round
// trip.
func (c *Connector) pipelineOK(host int, args []driver.NamedValue) bool {
	switch c.hosts[host].ConnConfig.DefaultQueryExecMode {
	case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe:
	default:
		return false
	}
	if len(args) > 0 {
		switch args[0].Value.(type) {
		case pgx.QueryExecMode, pgx.QueryRewriter, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
			return false
		}
	}
	return true
}

// descCache holds statement descriptions for the pipelined paths, shared
// by every connection of the connector: all hosts are physical copies of
// one cluster, so a description read on one holds on the others. Past
// maxDescriptions entries it starts over.
type descCache struct {
	m atomic.Pointer[sync.Map]
	n atomic.Int64
}

func (d *descCache) get(query string) *pgconn.StatementDescription {
	if m := d.m.Load(); m != nil {
		if v, ok := m.Load(query); ok {
			return v.(*pgconn.StatementDescription)
		}
	}
	return nil
}

func (d *descCache) put(query string, sd *pgconn.StatementDescription) {
	m := d.m.Load()
	if m == nil || d.n.Add(1) > maxDescriptions {
		m = new(sync.Map)
		d.m.Store(m)
		d.n.Store(1)
	}
	m.Store(query, sd)
}

func (d *descCache) drop(query string) {
	if m := d.m.Load(); m != nil {
		m.Delete(query)
	}
}

// encoded is a statement ready for SendQueryParams.
type encoded struct {
	query   string
	oids    []uint32
	params  [][]byte
	formats []int16
	results []int16 // result formats, as stdlib asks for them
}

// encode describes query on pc (once per connector: see descCache) and
// encodes args as pgx does for a described statement
// (QueryExecModeCacheDescribe). A statement without arguments whose rows
// are not wanted is sent as is.
func (c *Connector) encode(ctx context.Context, pc *pgx.Conn, query string, args []driver.NamedValue, rows bool) (encoded, error) {
	e := encoded{query: query}
	if len(args) == 0 && !rows {
		return e, nil
	}
	sd := c.descs.get(query)
	if sd == nil {
		var err error
		if sd, err = pc.PgConn().Prepare(ctx, "", query, nil); err != nil {
			return e, err
		}
		c.descs.put(query, sd)
	}
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	var eqb pgx.ExtendedQueryBuilder
	if err := eqb.Build(pc.TypeMap(), sd, vals); err != nil {
		return e, err
	}
	e.oids, e.params, e.formats = sd.ParamOIDs, eqb.ParamValues, eqb.ParamFormats
	if rows {
		e.results = resultFormats(sd.Fields)
	}
	return e, nil
}

func (e *encoded) send(pl *pgconn.Pipeline) {
	pl.SendQueryParams(e.query, e.params, e.oids, e.formats, e.results)
}

// execPositioned runs one statement on the primary session in autocommit
// mode and reads the WAL insert position after its commit, in one round
// trip: a pipeline of the statement, a Sync (which commits its implicit
// transaction), the position query and a second Sync.
//
// pos is 0 when the statement failed (nothing committed) or the position
// could not be read.
func (cn *conn) execPositioned(ctx context.Context, sc *stdlib.Conn, query string, args []driver.NamedValue) (tag pgconn.CommandTag, pos lagmeter.LSN, err error) {
	pc := sc.Conn()
	e, err := cn.c.encode(ctx, pc, query, args, false)
	if err != nil {
		return tag, 0, err
	}
	pl, err := startPositioned(ctx, pc, &e)
	if err != nil {
		return tag, 0, err
	}
	tag, err = pipelinedResult(pl, nil)
	pos, err = finishPositioned(pl, err)
	if isPgError(err) {
		// The statement may no longer match its description (a column
		// changed type): describe it again next time.
		cn.c.descs.drop(query)
	}
	return tag, pos, err
}

// startPositioned sends e and the position query, each followed by a Sync,
// in a pipeline on pc.
func startPositioned(ctx context.Context, pc *pgx.Conn, e *encoded) (*pgconn.Pipeline, error) {
	pl := pc.PgConn().StartPipeline(ctx)
	e.send(pl)
	pl.SendPipelineSync()
	pl.SendQueryParams(insertPositionSQL, nil, nil, nil, nil)
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		pl.Close()
		return nil, err
	}
	return pl, nil
}

// finishPositioned reads the position query and its Sync after a statement
// whose outcome was err, and ends the pipeline. pos is 0 when err is not
// nil.
func finishPositioned(pl *pgconn.Pipeline, err error) (lagmeter.LSN, error) {
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
		return 0, err
	}
	pos, _ := lagmeter.ParseLSN(text)
	return pos, nil
}

// queryPositioned is execPositioned for a statement that returns rows
// (INSERT … RETURNING): its rows stream to the caller, and once they are
// closed the position after the commit is read from the same pipeline and
// handed to done with the statement's outcome (see Connector.wroteAfter).
func (cn *conn) queryPositioned(ctx context.Context, sc *stdlib.Conn, query string, args []driver.NamedValue, done func(lagmeter.LSN, error)) (driver.Rows, error) {
	pc := sc.Conn()
	e, err := cn.c.encode(ctx, pc, query, args, true)
	if err != nil {
		return nil, err
	}
	pl, err := startPositioned(ctx, pc, &e)
	if err != nil {
		return nil, err
	}
	rr, err := nextResult(pl)
	if err != nil {
		if isPgError(err) {
			cn.c.descs.drop(query)
		}
		if serr := finishSync(pl, err); serr != nil {
			err = serr
		}
		finishPositioned(pl, err)
		return nil, err
	}
	return newResultRows(pc.TypeMap(), rr, func(rerr error) error {
		if serr := finishSync(pl, rerr); serr != nil && rerr == nil {
			rerr = serr
		}
		pos, perr := finishPositioned(pl, rerr)
		if rerr == nil && perr != nil {
			rerr = perr
		}
		if isPgError(rerr) {
			cn.c.descs.drop(query)
		}
		done(pos, rerr)
		return rerr
	})
}

// nextResult reads the next query's result reader from pl.
func nextResult(pl *pgconn.Pipeline) (*pgconn.ResultReader, error) {
	res, err := pl.GetResults()
	if err != nil {
		return nil, err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return nil, errors.New("pgrouted: pipeline: unexpected result")
	}
	return rr, nil
}

// finishSync reads the Sync that ends a pipeline segment after a query
// whose outcome was err. It returns the error that ended the connection,
// if that is what happened.
func finishSync(pl *pgconn.Pipeline, err error) error {
	if err != nil && !isPgError(err) {
		return err // the connection broke: nothing more to read
	}
	res, serr := pl.GetResults()
	if serr != nil && !isPgError(serr) {
		return serr
	}
	if _, ok := res.(*pgconn.PipelineSync); !ok && serr == nil {
		return errors.New("pgrouted: pipeline: expected a sync")
	}
	return nil
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
