package pgpipe

// This file is how a statement sent through a pipeline is encoded: pgx's
// QueryExecModeCacheDescribe (a description, cached, then the arguments
// encoded by pgx's ExtendedQueryBuilder against it), and which statements
// may be sent so at all.

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// OK reports whether a statement with args, for a connection configured
// with cfg, may be sent through a pgconn pipeline, encoded as pgx does for
// a described statement: not when the user chose how statements are sent
// (the simple protocol, exec without describe) in the connection string or
// with a pgx option among the arguments. Those keep pgx's own path, at the
// price of a round trip. Nor when a pgx QueryTracer is set: pgx traces the
// statements it runs, not the ones sent through a pipeline.
func OK(cfg *pgx.ConnConfig, args []driver.NamedValue) bool {
	if cfg.Tracer != nil {
		return false
	}
	switch cfg.DefaultQueryExecMode {
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

// maxDescriptions bounds the statement descriptions a Descs keeps; past it
// the cache starts over.
const maxDescriptions = 256

// Descs holds statement descriptions for the pipelined paths. A
// description is only valid where it was read: on one host (a replica may
// not have replayed a schema change yet) and under one session's settings
// (search_path decides which table a name means); the caller keeps one
// Descs per such place. A schema change made elsewhere still makes an
// entry stale: the server's refusal of a stale description is the
// caller's to recover from. Past maxDescriptions entries a cache starts
// over. Lookups take no lock and do not allocate. The zero value is an
// empty cache.
type Descs struct {
	m atomic.Pointer[sync.Map]
	n atomic.Int64
}

// Get returns the description of query, or nil.
func (d *Descs) Get(query string) *pgconn.StatementDescription {
	if m := d.m.Load(); m != nil {
		if v, ok := m.Load(query); ok {
			return v.(*pgconn.StatementDescription)
		}
	}
	return nil
}

// Put keeps sd as the description of query.
func (d *Descs) Put(query string, sd *pgconn.StatementDescription) {
	m := d.m.Load()
	if m == nil || d.n.Add(1) > maxDescriptions {
		m = new(sync.Map)
		d.m.Store(m)
		d.n.Store(1)
	}
	m.Store(query, sd)
}

// Drop forgets the description of query.
func (d *Descs) Drop(query string) {
	if m := d.m.Load(); m != nil {
		m.Delete(query)
	}
}

// Reset forgets every description.
func (d *Descs) Reset() {
	d.m.Store(nil)
	d.n.Store(0)
}

// Encoded is a statement ready to be sent in a pipeline: as the unnamed
// statement, or as a named one of a connection's Stmts.
type Encoded struct {
	query   string
	oids    []uint32
	params  [][]byte
	formats []int16
	results []int16 // result formats, as stdlib asks for them

	st     *Stmts   // the connection's named statements; nil: unnamed
	name   string   // its statement's name (with st)
	closes []string // the names deallocated before its Bind
	parse  bool     // its statement is prepared before its Bind
}

// EncodeError is an argument that cannot be encoded for its statement:
// nothing was sent, the connection is fine, and no other host would do
// better.
type EncodeError struct{ err error }

func (e *EncodeError) Error() string { return e.err.Error() }
func (e *EncodeError) Unwrap() error { return e.err }

// IsEncodeError reports whether err is, or wraps, an *EncodeError.
func IsEncodeError(err error) bool {
	var ee *EncodeError
	return errors.As(err, &ee)
}

// Encode describes query on pc, once per descs (see Descs), and encodes
// args as pgx does for a described statement (pgx's ExtendedQueryBuilder,
// the connection's type map). rows asks for the result formats stdlib asks
// for (ResultFormats). When the arguments do not fit a cached description,
// it may be stale: Encode describes the statement again and tries once
// more (nothing has been sent). An argument that does not fit a fresh
// description is an *EncodeError.
//
// With st (pc's named statements, see StmtsOf) the statement is sent as a
// named prepared statement, as pgx's QueryExecModeCacheStatement sends it:
// prepared once on the connection, in the round trip that describes it or
// pipelined before its first Bind. Without, it is sent as the unnamed
// statement, parsed at every execution, as pgx's
// QueryExecModeCacheDescribe sends it. A statement without arguments
// whose rows are not wanted is sent as is, unnamed (pgx sends it with the
// simple protocol).
func Encode(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, query string, args []driver.NamedValue, rows bool) (Encoded, error) {
	formats := noRows
	if rows {
		formats = stdlibRows
	}
	return encode(ctx, pc, descs, st, query, args, formats, nil)
}

// The result formats encode asks for.
const (
	noRows     = iota // none: the rows are not wanted
	stdlibRows        // stdlib's (ResultFormats)
	pgxRows           // pgx's own, for pgx's rows (ExtendedQueryBuilder.ResultFormats)
)

// encode is Encode with the result formats of results and the buffers of
// s, when not nil (see scratch): the Encoded's parameters (and pgx's
// result formats) are then s's, valid until its next use.
func encode(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, query string, args []driver.NamedValue, results int, s *scratch) (Encoded, error) {
	e := Encoded{query: query}
	if len(args) == 0 && results == noRows {
		return e, nil
	}
	if s == nil {
		s = new(scratch)
	}
	vals := s.values(args)
	defer clear(vals) // keep none of the caller's values alive
	sd := descs.Get(query)
	cached := sd != nil
	eqb := &s.eqb
	for {
		if sd == nil {
			var err error
			if sd, err = describe(ctx, pc.PgConn(), st, query); err != nil {
				return e, err
			}
			descs.Put(query, sd)
		}
		err := eqb.Build(pc.TypeMap(), sd, vals)
		if err == nil {
			break
		}
		descs.Drop(query)
		if !cached {
			return e, &EncodeError{err}
		}
		cached, sd = false, nil
	}
	e.oids, e.params, e.formats = sd.ParamOIDs, eqb.ParamValues, eqb.ParamFormats
	switch results {
	case stdlibRows:
		e.results = ResultFormats(sd.Fields)
	case pgxRows:
		e.results = eqb.ResultFormats
	}
	if st != nil {
		st.name(&e)
	}
	return e, nil
}

// describe describes query on pc, in one round trip: with st, as its named
// statement, which is then prepared (after a Close of its name, see
// Stmts); else as the unnamed statement.
func describe(ctx context.Context, pc *pgconn.PgConn, st *Stmts, query string) (*pgconn.StatementDescription, error) {
	if st == nil {
		return pc.Prepare(ctx, "", query, nil)
	}
	e := Encoded{query: query}
	st.name(&e)
	if !e.parse {
		// Prepared, with no parameter types to compare: described as
		// the unnamed statement, the named one stays.
		return pc.Prepare(ctx, "", query, nil)
	}
	pl := pc.StartPipeline(ctx)
	e.sendPrefix(pl)
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		pl.Close()
		return nil, err
	}
	sd, err := e.prefix(pl)
	if serr := FinishSync(pl, err); serr != nil && err == nil {
		err = serr
	}
	if cerr := pl.Close(); cerr != nil && err == nil && !IsPgError(cerr) {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	// Encode sends the statement with the types the server inferred.
	st.add(query, e.name, sd.ParamOIDs)
	return sd, nil
}

// Send queues e in pl: its Bind, Describe and Execute, after what its
// named statement needs (see Stmts.name).
func (e *Encoded) Send(pl *pgconn.Pipeline) {
	if e.st == nil {
		pl.SendQueryParams(e.query, e.params, e.oids, e.formats, e.results)
		return
	}
	e.sendPrefix(pl)
	pl.SendQueryPrepared(e.name, e.params, e.formats, e.results)
}

// Next reads e's result reader from pl, after what preceded its Bind. An
// error invalidates its named statement.
func (e *Encoded) Next(pl *pgconn.Pipeline) (*pgconn.ResultReader, error) {
	if _, err := e.prefix(pl); err != nil {
		e.failed(err)
		return nil, err
	}
	rr, err := NextResult(pl)
	e.failed(err)
	return rr, err
}
