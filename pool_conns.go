package pgrouted

import (
	"context"
	"errors"
	"sync"
)

// poolConns is a Pool's driver connections (conn): the idle ones, the most
// recently used last, and how many are in use. A call takes one, runs on
// it alone and puts it back (Pool.put, which decides whether it may be
// kept), as it would through database/sql's pool, with
// the same checks (driver.SessionResetter when one is reused,
// driver.Validator when it is put back) but without database/sql's
// per-call *sql.Conn, its locks and its bookkeeping: a pgx-native call
// costs what pgxpool's Acquire and Release do, not more.
type poolConns struct {
	c       *Connector
	maxIdle int // idle connections kept; the others are closed when put back

	mu     sync.Mutex
	idle   []*conn
	inUse  int
	closed bool
}

// errPoolClosed: a call on a Pool after its Close.
var errPoolClosed = errors.New("pgrouted: the Pool is closed")

// take returns an idle connection that its ResetSession keeps (one it
// refuses is closed), or a new one.
func (pc *poolConns) take(ctx context.Context) (*conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for {
		pc.mu.Lock()
		if pc.closed {
			pc.mu.Unlock()
			return nil, errPoolClosed
		}
		pc.inUse++
		n := len(pc.idle)
		if n == 0 {
			pc.mu.Unlock()
			break
		}
		cn := pc.idle[n-1]
		pc.idle[n-1] = nil
		pc.idle = pc.idle[:n-1]
		pc.mu.Unlock()
		if err := cn.ResetSession(ctx); err != nil {
			pc.put(cn, false)
			continue
		}
		return cn, nil
	}
	dc, err := pc.c.Connect(ctx)
	if err != nil {
		pc.mu.Lock()
		pc.inUse--
		pc.mu.Unlock()
		return nil, err
	}
	return dc.(*conn), nil
}

// put gives back cn, taken by take: kept idle when reuse says it may be
// and it is valid (IsValid), while fewer than maxIdle are, else closed.
func (pc *poolConns) put(cn *conn, reuse bool) {
	reuse = reuse && cn.IsValid()
	pc.mu.Lock()
	pc.inUse--
	if reuse && !pc.closed && len(pc.idle) < pc.maxIdle {
		pc.idle = append(pc.idle, cn)
		pc.mu.Unlock()
		return
	}
	pc.mu.Unlock()
	_ = cn.Close()
}

// keep keeps cn, a connection the Connector's health check opened a
// primary session on (pool_min_conns), idle, while fewer than maxIdle
// are; it reports whether it did. It is not counted in use.
func (pc *poolConns) keep(cn *conn) bool {
	if !cn.IsValid() { // parked from now on
		return false
	}
	pc.mu.Lock()
	if pc.closed || len(pc.idle) >= pc.maxIdle {
		pc.mu.Unlock()
		return false
	}
	pc.idle = append(pc.idle, cn)
	pc.mu.Unlock()
	return true
}

// close closes the idle connections; the ones in use are closed when put
// back, and take fails from now on. It reports false when it had run
// already.
func (pc *poolConns) close() bool {
	pc.mu.Lock()
	idle, was := pc.idle, pc.closed
	pc.idle, pc.closed = nil, true
	pc.mu.Unlock()
	for _, cn := range idle {
		_ = cn.Close()
	}
	return !was
}

// counts returns how many connections are in use and idle.
func (pc *poolConns) counts() (inUse, idle int) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.inUse, len(pc.idle)
}
