package pgrouted

import (
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// This file is a host's replica connections in flight: a connection
// borrowed from its pool for a read (or a read-only transaction) and given
// back, and the host's list of them, with the network connections its pool
// is opening, so that reads stuck on a host that stopped answering can be
// interrupted when its circuit opens. The replica path (replica.go)
// borrows; the host (host.go) owns the list.

// borrowed is a replica connection taken from a host's pool; it counts as
// one of the host's in-flight reads until it is given back.
//
// An autocommit statement takes it from the pgxpool.Pool directly (pc),
// and runs on its pgx.Conn as stdlib would (pgpipe.Rows.Query,
// stdlibExec). A read-only transaction takes it through stdlib's pool
// connector (sc): stdlib runs the transaction's database/sql statements.
type borrowed struct {
	pc    *pgxpool.Conn
	sc    *stdlib.Conn
	h     *host
	given bool
	// prev and next link it into its host's list of borrowed connections
	// while it is in flight (hostFlight); nil otherwise.
	prev, next *borrowed
}

// conn returns the borrowed pgx connection.
func (b *borrowed) conn() *pgx.Conn {
	if b.sc != nil {
		return b.sc.Conn()
	}
	return b.pc.Conn()
}

// giveBack returns the connection to its pool (the pool drops it if it
// broke). Later calls do nothing.
func (b *borrowed) giveBack() {
	if b.given {
		return
	}
	b.given = true
	b.h.flight.remove(b)
	if b.sc != nil {
		b.sc.Close()
	} else {
		b.pc.Release()
	}
}

// hostFlight is a host's borrowed connections, and the network connections
// its pool is opening, so that reads stuck on a host that stopped answering
// can be interrupted when its circuit opens.
type hostFlight struct {
	n  atomic.Int64 // in-flight reads, for selection and observation
	mu sync.Mutex
	// conns is the borrowed connections, a list through their prev and
	// next (no map to hash into and out of at every read): conns.next is
	// the first, and the last one's next is &conns. The zero hostFlight's
	// list is empty (conns.next nil).
	conns   borrowed
	dialing map[*dialingConn]struct{}
}

// dialingConn is a network connection of the pool while pgx opens a
// PostgreSQL connection on it (startup, authentication).
type dialingConn struct {
	net.Conn
	f *hostFlight
}

// Close implements net.Conn.
func (c *dialingConn) Close() error {
	c.f.mu.Lock()
	delete(c.f.dialing, c)
	c.f.mu.Unlock()
	return c.Conn.Close()
}

// opening tracks c until opened is called with it.
func (f *hostFlight) opening(c net.Conn) net.Conn {
	d := &dialingConn{Conn: c, f: f}
	f.mu.Lock()
	if f.dialing == nil {
		f.dialing = make(map[*dialingConn]struct{})
	}
	f.dialing[d] = struct{}{}
	f.mu.Unlock()
	return d
}

// opened stops tracking the network connection under a PostgreSQL
// connection pgx has opened (c, or the one under its TLS layer).
func (f *hostFlight) opened(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if d, ok := c.(*dialingConn); ok {
		f.mu.Lock()
		delete(f.dialing, d)
		f.mu.Unlock()
	}
}

// add counts b, just borrowed, as in flight.
func (f *hostFlight) add(b *borrowed) {
	f.n.Add(1)
	f.mu.Lock()
	head := &f.conns
	if head.next == nil {
		head.next, head.prev = head, head
	}
	b.prev, b.next = head.prev, head
	head.prev.next = b
	head.prev = b
	f.mu.Unlock()
}

// remove stops counting b, given back; one not counted (never added, or
// removed already) is left alone.
func (f *hostFlight) remove(b *borrowed) {
	f.mu.Lock()
	if b.next != nil {
		b.prev.next, b.next.prev = b.next, b.prev
		b.prev, b.next = nil, nil
		f.n.Add(-1)
	}
	f.mu.Unlock()
}

// each calls fn with every borrowed connection; f.mu is held.
func (f *hostFlight) each(fn func(*borrowed)) {
	if f.conns.next == nil {
		return
	}
	for b := f.conns.next; b != &f.conns; b = b.next {
		fn(b)
	}
}

// abort closes the network connection under every borrowed connection, and
// every one the pool is opening: a read waiting on a host that stopped
// answering fails at once, and runs elsewhere if no row reached the caller
// yet.
func (f *hostFlight) abort() int {
	f.mu.Lock()
	cs := make([]net.Conn, 0, int(f.n.Load())+len(f.dialing))
	f.each(func(b *borrowed) { cs = append(cs, b.conn().PgConn().Conn()) })
	n := len(cs)
	for d := range f.dialing {
		cs = append(cs, d.Conn)
	}
	f.dialing = nil
	f.mu.Unlock()
	// Outside the lock: closing a pool connection's network connection
	// takes it (dialingConn.Close).
	for _, c := range cs {
		c.Close()
	}
	return n
}
