package pgrouted

// This file is what the pipelined paths share: statements sent through a
// pgconn pipeline (a write with the position after its commit, on the
// primary path; a read after its replica's position check, on the replica
// path), encoded as pgx does, with their descriptions cached.

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// maxDescriptions bounds the statement descriptions kept for the
// pipelined paths; past it the cache starts over.
const maxDescriptions = 256

// pipelineOK reports whether a statement with args for host may be sent
// through a pgconn pipeline, encoded as pgx does for a described statement:
// not when the user chose how statements are sent (the simple protocol,
// exec without describe) in the connection string or with a pgx option
// among the arguments. Those keep pgx's own path, at the price of a round
// trip.
func (c *Connector) pipelineOK(host *host, args []driver.NamedValue) bool {
	switch host.ConnConfig.DefaultQueryExecMode {
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

// descCache holds statement descriptions for the pipelined paths. A
// description is only valid where it was read: on one host (a replica may
// not have replayed a schema change yet) and under one session's settings
// (search_path decides which table a name means). So each host has one,
// shared by the connections in the default session state (every replica
// connection, and the primary sessions that changed no session state), and
// a primary session that changed its state (a pinned connection) has its
// own (conn.descsOf). A schema change made elsewhere still makes an entry
// stale: the server's refusal of a stale description is recovered from
// (stale.go). Past maxDescriptions entries a cache starts over. Lookups
// take no lock and do not allocate.
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

// reset forgets every description.
func (d *descCache) reset() {
	d.m.Store(nil)
	d.n.Store(0)
}

// encoded is a statement ready for SendQueryParams.
type encoded struct {
	query   string
	oids    []uint32
	params  [][]byte
	formats []int16
	results []int16 // result formats, as stdlib asks for them
}

// encodeError is an argument that cannot be encoded for its statement:
// nothing was sent, the connection is fine, and no other host would do
// better.
type encodeError struct{ err error }

func (e *encodeError) Error() string { return e.err.Error() }
func (e *encodeError) Unwrap() error { return e.err }

func isEncodeError(err error) bool {
	var ee *encodeError
	return errors.As(err, &ee)
}

// encode describes query on pc, once per descs (see descCache), and
// encodes args as pgx does for a described statement
// (QueryExecModeCacheDescribe). A statement without arguments whose rows
// are not wanted is sent as is. When the arguments do not fit a cached
// description, it may be stale: encode describes the statement again and
// tries once more (nothing has been sent). An argument that does not fit
// a fresh description is an *encodeError.
func encode(ctx context.Context, pc *pgx.Conn, descs *descCache, query string, args []driver.NamedValue, rows bool) (encoded, error) {
	e := encoded{query: query}
	if len(args) == 0 && !rows {
		return e, nil
	}
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	sd := descs.get(query)
	cached := sd != nil
	var eqb pgx.ExtendedQueryBuilder
	for {
		if sd == nil {
			var err error
			if sd, err = pc.PgConn().Prepare(ctx, "", query, nil); err != nil {
				return e, err
			}
			descs.put(query, sd)
		}
		err := eqb.Build(pc.TypeMap(), sd, vals)
		if err == nil {
			break
		}
		descs.drop(query)
		if !cached {
			return e, &encodeError{err}
		}
		cached, sd = false, nil
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
