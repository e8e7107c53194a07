package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PoolConn is a connection acquired from a [Pool] ([Pool.Acquire]): one
// session on the primary, where every statement runs (reads forced to a
// replica with [WithRoute] excepted), session state included. It is not
// safe for concurrent use, as pgx's connections are not. When the primary
// changes, its session is gone with its state: statements fail until it is
// released, and another one acquired.
type PoolConn struct {
	p  *Pool
	cn *conn
	// dirty is set once session state may have been changed: Release
	// closes the connection instead of giving it back.
	dirty    bool
	released bool
}

// errReleased is the error of a PoolConn used after its release.
var errReleased = errors.New("pgrouted: connection released")

// note marks c dirty when cl changes session state by its text.
func (c *PoolConn) note(ctx context.Context, cl *call) {
	if c.dirty {
		return
	}
	if px := pgxOf(cl); px.kind == pxBatch {
		for _, q := range px.batch.QueuedQueries {
			c.dirty = c.dirty || c.p.c.changesSession(ctx, q.SQL)
		}
		return
	}
	c.dirty = c.p.c.changesSession(ctx, cl.query)
}

// run runs a call on the connection's session, and returns its outcome.
func (c *PoolConn) run(ctx context.Context, cl *call) (outcome, error) {
	if c.released {
		return outcome{}, errReleased
	}
	c.note(ctx, cl)
	o, err := c.cn.runAfter(ctx, cl, outcome{})
	if errors.Is(err, driver.ErrBadConn) {
		err = fmt.Errorf("pgrouted: the acquired connection's primary session is gone (the primary changed, or the session broke): release it and acquire another: %w", err)
	}
	return o, err
}

// Release gives the connection back to its Pool (or closes it, when its
// session state was changed). Later calls do nothing.
func (c *PoolConn) Release() {
	if c.released {
		return
	}
	c.released = true
	if c.dirty {
		c.p.put(c.cn, driver.ErrBadConn)
		return
	}
	c.cn.pinned, c.cn.descs = false, nil
	c.p.put(c.cn, nil)
}

// Exec runs sql on the connection's session, as pgx.Conn.Exec does.
func (c *PoolConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return execOn(ctx, c.run, sql, args)
}

// Query runs sql on the connection's session, as pgx.Conn.Query does.
func (c *PoolConn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return queryOn(ctx, c.run, sql, args)
}

// QueryRow runs sql on the connection's session, as pgx.Conn.QueryRow does.
func (c *PoolConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return queryRowOn(ctx, c.run, sql, args)
}

// SendBatch sends b on the connection's session, as pgx.Conn.SendBatch does.
func (c *PoolConn) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return sendBatchOn(ctx, c.p.c, c.run, b, true)
}

// CopyFrom copies rowSrc into tableName on the connection's session, as
// pgx.Conn.CopyFrom does.
func (c *PoolConn) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	return copyFromOn(ctx, c.run, tableName, columnNames, rowSrc)
}

// Begin begins a transaction on the connection's session.
func (c *PoolConn) Begin(ctx context.Context) (pgx.Tx, error) {
	return c.BeginTx(ctx, pgx.TxOptions{})
}

// BeginTx begins a transaction with opts on the connection's session (a
// read-only one too: the connection is pinned to the primary).
func (c *PoolConn) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	if c.released {
		return nil, errReleased
	}
	t, err := beginOn(ctx, c.cn, opts)
	if err != nil {
		return nil, err
	}
	t.owner = c
	return t, nil
}

// Ping checks the connection's session.
func (c *PoolConn) Ping(ctx context.Context) error {
	if c.released {
		return errReleased
	}
	return pingPrimary(ctx, c.cn)
}

// Conn returns the pgx connection of the session, for what pgx alone
// offers (WaitForNotification, for one), or nil once the session is gone.
// What runs on it directly is not routed nor reported; the connection is
// closed, not reused, when released.
func (c *PoolConn) Conn() *pgx.Conn {
	c.dirty = true
	if c.released || c.cn.primary == nil {
		return nil
	}
	return c.cn.primary.Conn()
}
