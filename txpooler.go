package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
)

// This file is what changes behind a connection pooler (PgBouncer, or a
// managed pooler built on it) in front of a host. In pool_mode=transaction
// a pooler gives each transaction (each autocommit statement) whichever
// server session is free, so:
//
//   - a named prepared statement, pgx's statement cache
//     (default_query_exec_mode=cache_statement, pgx's default), exists on
//     the server session it was prepared on only: on another one it is
//     missing (26000), and a client preparing the same text on a session
//     another client already prepared it on is refused (42P05). pgrouted's
//     own pipelined paths use the unnamed statement only, and so does pgx
//     in cache_describe and exec mode;
//   - session state (SET, temporary tables, advisory locks, LISTEN,
//     PREPARE) does not last beyond the transaction that made it: the
//     connection pgrouted pins to the primary session is not a server
//     session any more.
//
// The probes tell a pooler (topology.HostState.Pooler): the server process
// a probe runs on is not the one its connection announced. On such a host,
// and on a host not probed yet, pgx's own path runs in cache_describe mode
// rather than cache_statement (see statementArgs), and a connection that
// pins session state there is logged once (see pinned).

// poolerNotes is what a Connector said of connection poolers.
type poolerNotes struct {
	// pinLogged is set once a connection pinned session state behind a
	// connection pooler was logged.
	pinLogged atomic.Bool
}

// statementArgs returns args for a statement that pgx runs on host h
// (the paths that are not pipelined): with pgx's exec mode option
// QueryExecModeCacheDescribe in front when the DSN left pgx's default
// (cache_statement) and the host is behind a pooler, or not probed yet.
// Arguments that already start with an exec mode are left alone.
func (c *Connector) statementArgs(h *host, args []driver.NamedValue) []driver.NamedValue {
	if !c.describeOnly(h) {
		return args
	}
	if len(args) > 0 {
		if _, ok := args[0].Value.(pgx.QueryExecMode); ok {
			return args
		}
	}
	out := make([]driver.NamedValue, 0, len(args)+1)
	out = append(out, driver.NamedValue{Value: pgx.QueryExecModeCacheDescribe})
	return append(out, args...)
}

// describeOnly reports whether pgx's own path must not use named prepared
// statements on host h: the DSN left pgx's default mode, and the host is
// behind a pooler or has not answered a probe yet.
func (c *Connector) describeOnly(h *host) bool {
	if h.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return false
	}
	hv := c.view().of(h)
	if hv == nil {
		return true
	}
	st := hv.probe
	if st.LastSuccess.IsZero() {
		return true
	}
	if !st.Pooler {
		return false
	}
	if h.poolerLogged.CompareAndSwap(false, true) && c.log != nil {
		c.log.Info("pgrouted: host behind a connection pooler: pgx's statements use the unnamed statement (cache_describe), not named prepared statements",
			"host", h.Name, "backendSwitched", st.BackendSwitched)
	}
	return true
}

// stmtsOf returns the named statements of pc, a connection to h, for the
// pipelined paths (internal/pgpipe), which name their statements where
// pgx's own path would (cache_statement): prepared once per connection,
// as pgx's statement cache does. nil (the unnamed statement, parsed at
// every execution) when the DSN chose another mode (cache_describe; the
// other modes do not take the pipelined paths, see pgpipe.OK), or when h
// is behind a pooler or not probed yet (describeOnly): a named statement
// is never sent through a pooler.
func (c *Connector) stmtsOf(h *host, pc *pgx.Conn) *pgpipe.Stmts {
	if h.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || c.describeOnly(h) {
		return nil
	}
	return pgpipe.StmtsOf(pc.PgConn(), h.ConnConfig.StatementCacheCapacity)
}

// behindPooler reports whether the probes found h behind a connection
// pooler (topology.HostState.Pooler).
func (c *Connector) behindPooler(h *host) bool {
	hv := c.view().of(h)
	return hv != nil && hv.probe.Pooler
}

// warnPinnedBehindPooler says once per Connector, through Config.Logger,
// that a connection was pinned to a primary session on h, when h is behind
// a pooler: there the session state may be gone by the next transaction.
func (c *Connector) warnPinnedBehindPooler(h *host) {
	hv := c.view().of(h)
	if hv == nil || !hv.probe.Pooler || c.log == nil || !c.pooler.pinLogged.CompareAndSwap(false, true) {
		return
	}
	level, msg := slog.LevelWarn, "pgrouted: session state on a host behind a connection pooler: the connection stays on the primary, but in pool_mode=transaction the pooler may run its next transaction on another server session, without this state (SET, temporary tables, advisory locks, LISTEN, prepared statements)"
	c.log.Log(context.Background(), level, msg, "host", hv.Name, "backendSwitched", hv.probe.BackendSwitched)
}

// poolerHint is the advice added to the error of a statement that a
// server refused for want of, or because of, one of pgx's named prepared
// statements ("stmtcache_…", SQLSTATE 26000 or 42P05): what a connection
// pooler in transaction mode does to them, and the setting that avoids
// them.
const poolerHint = "pgrouted: pgx's named prepared statement is missing on, or already exists on, " +
	"this server session: a connection pooler in transaction mode (PgBouncer) shares server sessions between clients; " +
	"use default_query_exec_mode=cache_describe (or exec) in the connection string, and no pgx.QueryExecModeCacheStatement argument " +
	"(pgrouted uses cache_describe by itself on hosts whose probes see a pooler)"

// poolerError is a PostgreSQL error about one of pgx's named prepared
// statements, with poolerHint. errors.As still finds the *pgconn.PgError.
type poolerError struct{ err error }

func (e *poolerError) Error() string { return e.err.Error() + "; " + poolerHint }
func (e *poolerError) Unwrap() error { return e.err }

// withPoolerHint adds poolerHint to err when it is the refusal of one of
// pgx's named prepared statements: 42P05 "prepared statement
// "stmtcache_…" already exists" or 26000 "prepared statement
// "stmtcache_…" does not exist". A statement named by the application
// (PREPARE, EXECUTE) gets no hint.
func withPoolerHint(err error) error {
	if err == nil {
		return nil // before pe, which errors.As moves to the heap
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || (pe.Code != "42P05" && pe.Code != "26000") {
		return err
	}
	if !strings.HasPrefix(pe.Message, `prepared statement "stmtcache_`) {
		return err
	}
	var already *poolerError
	if errors.As(err, &already) {
		return err
	}
	return &poolerError{err}
}
