package pgrouted

import (
	"context"
	"database/sql/driver"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

// stmt is a prepared statement. Preparing checks it on the server (see
// conn.describe); every execution is routed like any other statement, and
// pgx prepares it on the connection that runs it (once per physical
// connection, then from its cache), so a prepared read still goes to a
// replica.
type stmt struct {
	cn       *conn
	query    string
	numInput int // its parameters, as the server described them
}

// Close implements driver.Stmt.
func (s *stmt) Close() error { return nil }

// NumInput implements driver.Stmt: the number of parameters the server
// found in the statement.
func (s *stmt) NumInput() int { return s.numInput }

// describe parses and describes query on the server, in one round trip
// and with the unnamed statement (nothing stays prepared), for
// PrepareContext. Every host is a copy of the primary, so any may check
// it: the connection of the open transaction; else the primary session,
// when the connection has one; else where a read of the statement would
// run (Connector.plan), on the replica path (one that holds the caller's
// writes, so that a table the caller just created is there; another
// replica when its connection fails; the primary when the plan allows it,
// else the plan's error); else the primary. Outside a transaction the
// description is kept where it is valid (see pgpipe.Descs), for the
// executions.
func (cn *conn) describe(ctx context.Context, query string) (*pgconn.StatementDescription, error) {
	switch {
	case cn.tx != nil && cn.tx.replica != nil:
		return prepareOn(ctx, cn.tx.replica.conn(), query, nil)
	case cn.tx != nil || cn.inSQLTx():
		// It may see the transaction's own changes: not kept.
		return prepareOn(ctx, cn.primary.Conn(), query, nil)
	case cn.primary != nil && !cn.epochChanged() && !cn.primary.Conn().IsClosed():
		return prepareOn(ctx, cn.primary.Conn(), query, cn.descsOf())
	}
	var p plan
	cn.c.plan(ctx, &request{r: sqlclass.Result{Class: sqlclass.Read, Statements: 1}, pinned: cn.pinned}, false, &p)
	if p.err != nil {
		return nil, p.err
	}
	cl := newSQLCall(callText{kind: callDescribe, query: query})
	_, done, err := cn.onReplicas(ctx, &p, cl)
	sd := cl.sd
	cl.recycle()
	if done {
		return sd, err
	}
	// The plan, or the replicas' fallback: the primary checks it.
	sc, err := cn.primaryConn(ctx, OpWrite)
	if err != nil {
		return nil, err
	}
	descs := cn.descsOf()
	if cn.inSQLTx() {
		descs = nil
	}
	return prepareOn(ctx, sc.Conn(), query, descs)
}

// Exec implements driver.Stmt.
func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.cn.ExecContext(context.Background(), s.query, named(args))
}

// Query implements driver.Stmt.
func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.cn.QueryContext(context.Background(), s.query, named(args))
}

// ExecContext implements driver.StmtExecContext.
func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.cn.ExecContext(ctx, s.query, args)
}

// QueryContext implements driver.StmtQueryContext.
func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.cn.QueryContext(ctx, s.query, args)
}

// CheckNamedValue implements driver.NamedValueChecker.
func (s *stmt) CheckNamedValue(*driver.NamedValue) error { return nil }

func named(args []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, v := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv
}

var (
	_ driver.Stmt              = (*stmt)(nil)
	_ driver.StmtExecContext   = (*stmt)(nil)
	_ driver.StmtQueryContext  = (*stmt)(nil)
	_ driver.NamedValueChecker = (*stmt)(nil)
)

// PrepareContext implements driver.ConnPrepareContext. The statement is
// checked on the server, parsed and described in one round trip as pgx
// does (an invalid one fails here with the server's error), and its
// description is kept for the executions on that host; each execution is
// then routed like any statement (stmt.go).
func (cn *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	cn.used()
	if cn.bad {
		return nil, driver.ErrBadConn
	}
	sd, err := cn.describe(ctx, query)
	if err != nil {
		return nil, err
	}
	return &stmt{cn: cn, query: query, numInput: len(sd.ParamOIDs)}, nil
}

// Prepare implements driver.Conn.
func (cn *conn) Prepare(query string) (driver.Stmt, error) {
	return cn.PrepareContext(context.Background(), query)
}
