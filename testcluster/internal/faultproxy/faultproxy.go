// Package faultproxy is a small in-process TCP proxy that injects network
// faults: latency on the bytes flowing back from the server, a blackhole that
// silently swallows every byte, and connection resets. It exists for
// testcluster, which puts one in front of every PostgreSQL node and on every
// replica's replication link.
//
// A [Proxy] listens on a loopback port chosen by the system and forwards each
// connection it accepts to its current upstream address. Every fault applies
// to existing connections as well as to new ones. All methods are safe for
// concurrent use.
package faultproxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by the methods of a [Proxy] that has been closed.
var ErrClosed = errors.New("faultproxy: proxy closed")

const (
	// readSize is the largest chunk one read takes from a connection.
	readSize = 32 << 10
	// queueLen is how many chunks a direction of a connection holds between
	// its reader and its writer (while latency delays them, or while the
	// receiver is slow). It bounds the memory of a direction to
	// queueLen*readSize bytes; a full queue blocks the reader, as a full TCP
	// window would.
	queueLen = 256
	// dialTimeout bounds the dial of the upstream address.
	dialTimeout = 10 * time.Second
)

// Proxy is a TCP fault point. Create one with [New] and stop it with
// [Proxy.Close].
type Proxy struct {
	ln   net.Listener
	addr string

	// latency is the delay, in nanoseconds, of the downstream direction.
	latency atomic.Int64
	// holed is set while a blackhole is in place. It only changes with mu
	// held; readers and writers load it without the lock.
	holed atomic.Bool

	mu       sync.Mutex
	upstream string
	conns    map[*conn]struct{}
	closed   bool

	quit chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// New starts a proxy listening on 127.0.0.1 on a free port, forwarding to
// upstream (a host:port). Nothing is dialed until a connection arrives, so
// upstream need not be listening yet.
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		ln:       ln,
		addr:     ln.Addr().String(),
		upstream: upstream,
		conns:    make(map[*conn]struct{}),
		quit:     make(chan struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the host:port the proxy listens on. It never changes.
func (p *Proxy) Addr() string { return p.addr }

// Upstream is the host:port new connections are forwarded to.
func (p *Proxy) Upstream() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.upstream
}

// SetUpstream makes new connections go to addr and resets the existing ones,
// which lead to the old address. It does nothing when addr is the current
// upstream.
func (p *Proxy) SetUpstream(addr string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if addr == p.upstream {
		return nil
	}
	p.upstream = addr
	p.resetLocked()
	return nil
}

// SetLatency delays every chunk of bytes flowing back from the upstream
// server (the downstream direction) by d, counted from the moment the proxy
// read it, on existing and new connections. The order of the bytes is kept:
// a chunk is never written before the chunks read before it. Chunks already
// read keep the latency they were read with. A later call replaces the
// latency; d <= 0 removes it. The proxy keeps reading while chunks wait, so
// latency delays bytes without throttling throughput (up to a bounded
// queue per connection).
func (p *Proxy) SetLatency(d time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.latency.Store(int64(max(d, 0)))
	return nil
}

// Latency is the current latency of the downstream direction.
func (p *Proxy) Latency() time.Duration { return time.Duration(p.latency.Load()) }

// Blackhole cuts every connection off, as a network partition would: from
// now on every byte in either direction is read and silently dropped
// (including bytes that were waiting out a latency), connections stay open,
// and new connections are accepted and never answered (the upstream is not
// even dialed). A chunk whose write had already begun may still arrive. The
// blackhole stays until [Proxy.Heal]; calling Blackhole again does nothing.
func (p *Proxy) Blackhole() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.holed.Store(true)
	return nil
}

// Blackholed reports whether a blackhole is in place.
func (p *Proxy) Blackholed() bool { return p.holed.Load() }

// Heal removes every fault: the latency and the blackhole. When a blackhole
// was in place, every connection is reset, since each went through it and
// lost the bytes it swallowed; otherwise connections are left alone.
func (p *Proxy) Heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.latency.Store(0)
	if p.holed.Load() {
		// Close first, then lift the blackhole, so that no connection
		// delivers bytes after some were swallowed.
		p.resetLocked()
		p.holed.Store(false)
	}
	return nil
}

// Reset closes every connection that goes through the proxy now, on both
// sides, as a peer reset would. The listener stays open on the same address,
// so new connections work at once. Faults stay in place.
func (p *Proxy) Reset() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.resetLocked()
	return nil
}

func (p *Proxy) resetLocked() {
	for c := range p.conns {
		c.close()
	}
}

// Conns is the number of connections the proxy holds: accepted and not yet
// finished (a connection that was closed may count until its goroutines have
// returned).
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops the proxy: it closes the listener and every connection, and
// returns when every goroutine the proxy started has returned. Later calls
// return ErrClosed.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closed = true
	close(p.quit)
	err := p.ln.Close()
	p.resetLocked()
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// acceptLoop accepts connections until the listener is closed, and starts
// one handler per connection.
func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	var backoff time.Duration
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			select {
			case <-p.quit:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure, such as running out of file descriptors:
			// wait a little and retry, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-p.quit:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		c := newConn(nc)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			continue
		}
		// Registering the connection and reading the state it starts with
		// under one lock keeps it consistent with Heal, Reset and
		// SetUpstream: either they see the connection or it sees their
		// effect.
		p.conns[c] = struct{}{}
		upstream, holed := p.upstream, p.holed.Load()
		p.wg.Add(1)
		p.mu.Unlock()
		go p.handle(c, upstream, holed)
	}
}

// handle runs one connection to its end and forgets it.
func (p *Proxy) handle(c *conn, upstream string, holed bool) {
	defer p.wg.Done()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if holed {
		// Accepted inside a blackhole: swallow whatever the client sends
		// until the connection is closed (by the client, Heal, Reset, ...).
		buf := make([]byte, readSize)
		for {
			if _, err := c.client.Read(buf); err != nil {
				return
			}
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, dialTimeout)
	var d net.Dialer
	server, err := d.DialContext(ctx, "tcp", upstream)
	cancel()
	if err != nil {
		return // closing the client tells it the upstream is unreachable
	}
	if !c.setServer(server) {
		server.Close()
		return
	}
	up := make(chan chunk, queueLen)
	down := make(chan chunk, queueLen)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		p.read(c, c.client, up, false)
	}()
	go func() {
		defer wg.Done()
		p.write(c, server, up)
	}()
	go func() {
		defer wg.Done()
		p.read(c, server, down, true)
	}()
	p.write(c, c.client, down)
	wg.Wait()
}

// chunk is a run of bytes read from one side of a connection, with the time
// it is due on the other side.
type chunk struct {
	data []byte
	due  time.Time
}

// read copies src into q, chunk by chunk, until src fails or the connection
// closes, then closes q. Chunks read while a blackhole is in place are
// dropped. When delayed is set, each chunk is due the current latency after
// it was read. read never waits for the writer, except when q is full.
func (p *Proxy) read(c *conn, src net.Conn, q chan<- chunk, delayed bool) {
	defer close(q)
	buf := make([]byte, readSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.holed.Load() {
			ch := chunk{data: append([]byte(nil), buf[:n]...)}
			if delayed {
				if lat := p.latency.Load(); lat > 0 {
					ch.due = time.Now().Add(time.Duration(lat))
				}
			}
			select {
			case q <- ch:
			case <-c.ctx.Done():
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// write copies the chunks of q to dst in order, each once it is due. Chunks
// found while a blackhole is in place are dropped. When q ends (its source
// has closed or failed) or a write fails, write closes the connection on
// both sides, unless a blackhole is in place: a partition also swallows the
// end of a stream, so the connection is then held until it is reset.
func (p *Proxy) write(c *conn, dst net.Conn, q <-chan chunk) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		var ch chunk
		var ok bool
		select {
		case ch, ok = <-q:
		case <-c.ctx.Done():
			return
		}
		if !ok {
			if p.holed.Load() {
				<-c.ctx.Done()
				return
			}
			c.close()
			return
		}
		if wait := time.Until(ch.due); !ch.due.IsZero() && wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-c.ctx.Done():
				return
			}
		}
		if p.holed.Load() {
			continue
		}
		if _, err := dst.Write(ch.data); err != nil {
			c.close()
			return
		}
	}
}

// conn is one proxied connection: the client side the proxy accepted and,
// once dialed, the server side.
type conn struct {
	client net.Conn
	ctx    context.Context // done when the connection is closed
	cancel context.CancelFunc

	mu     sync.Mutex
	server net.Conn
	closed bool
}

func newConn(client net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{client: client, ctx: ctx, cancel: cancel}
}

// setServer records the dialed server side. It reports false when the
// connection was closed meanwhile; the caller then closes server.
func (c *conn) setServer(server net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.server = server
	return true
}

// close closes both sides and wakes every goroutine of the connection (and
// a dial in progress). It may be called any number of times.
func (c *conn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	server := c.server
	c.mu.Unlock()
	c.cancel()
	c.client.Close()
	if server != nil {
		server.Close()
	}
}
