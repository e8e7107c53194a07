package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/internal/testhelp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// server is a plain TCP echo server. When greeting is set, it writes it on
// each connection before echoing.
type server struct {
	ln       net.Listener
	greeting string
	accepted atomic.Int32 // connections accepted
	ended    atomic.Int32 // connections whose read ended (EOF or error)
	received atomic.Int64 // bytes received

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newServer(t *testing.T, greeting string) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln, greeting: greeting}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer s.ended.Add(1)
				if s.greeting != "" {
					if _, err := io.WriteString(c, s.greeting); err != nil {
						return
					}
				}
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					s.received.Add(int64(n))
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *server) addr() string { return s.ln.Addr().String() }

func (s *server) close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func newProxy(t *testing.T, upstream string) *Proxy {
	t.Helper()
	p, err := New(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back, and returns how long it took.
func roundTrip(t *testing.T, c net.Conn, msg string) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	expectRead(t, c, msg)
	return time.Since(start)
}

// expectRead reads exactly len(want) bytes and checks them.
func expectRead(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read %q: %v (got %q)", want, err, got)
	}
	if string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

// expectSilence checks that nothing arrives on c for d, and that c is still
// open.
func expectSilence(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 1)
	n, err := c.Read(buf)
	if n > 0 {
		t.Fatalf("read %q through a blackhole", buf[:n])
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read through a blackhole: %v, want a timeout (connection open)", err)
	}
}

// expectClosed checks that c is closed by its peer (EOF or reset) within a
// generous delay, after reading any bytes still in flight.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("connection still open")
	}
}

// waitFor polls cond until it holds, for a generous while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testhelp.WaitFor(t, 10*time.Second, time.Millisecond, what, cond)
}

func TestForward(t *testing.T) {
	s := newServer(t, "")
	p := newProxy(t, s.addr())
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") || p.Addr() == "127.0.0.1:0" {
		t.Fatalf("Addr %q", p.Addr())
	}
	if p.Upstream() != s.addr() {
		t.Fatalf("Upstream %q, want %q", p.Upstream(), s.addr())
	}
	var conns []net.Conn
	for i := 0; i < 3; i++ {
		conns = append(conns, dial(t, p.Addr()))
	}
	for i, c := range conns {
		roundTrip(t, c, fmt.Sprintf("hello %d", i))
	}
	// A large transfer, echoed concurrently, arrives intact.
	c := conns[0]
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB
	errc := make(chan error, 1)
	go func() {
		_, err := io.WriteString(c, big)
		errc <- err
	}()
	expectRead(t, c, big)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "3 connections", func() bool { return p.Conns() == 3 })
	// A client that closes ends its connection on both sides.
	conns[1].Close()
	waitFor(t, "the server side to end", func() bool { return s.ended.Load() == 1 })
	waitFor(t, "the proxy to forget the connection", func() bool { return p.Conns() == 2 })
}

func TestServerCloseFlushesFirst(t *testing.T) {
	// A server that writes and closes: the client gets every byte, then EOF,
	// even with latency.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.WriteString(c, "bye")
		c.Close()
	}()
	p := newProxy(t, ln.Addr().String())
	if err := p.SetLatency(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "bye" {
		t.Fatalf("read %q, %v; want \"bye\" then EOF", b, err)
	}
	<-done
}

func TestUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := newProxy(t, dead)
	c := dial(t, p.Addr())
	expectClosed(t, c)
	waitFor(t, "the proxy to forget the connection", func() bool { return p.Conns() == 0 })
}

func TestLatency(t *testing.T) {
	s := newServer(t, "")
	p := newProxy(t, s.addr())
	c := dial(t, p.Addr()) // opened before the latency: it applies too
	roundTrip(t, c, "warm")

	const lat = 300 * time.Millisecond
	if err := p.SetLatency(lat); err != nil {
		t.Fatal(err)
	}
	if p.Latency() != lat {
		t.Fatalf("Latency %v", p.Latency())
	}
	// The latency is a lower bound; the upper bound is a sanity check only.
	start := time.Now()
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	// The request itself is not delayed: the server gets it well before
	// the reply comes back.
	waitFor(t, "the server to receive the request", func() bool { return s.received.Load() == int64(len("warm")+len("ping")) })
	serverGot := time.Since(start)
	expectRead(t, c, "ping")
	d := time.Since(start)
	if d < lat || d > lat+5*time.Second {
		t.Fatalf("round trip with %v latency took %v", lat, d)
	}
	if serverGot >= lat {
		t.Logf("note: the server got the request after %v (busy machine?)", serverGot)
	}
	// A new connection has the latency too.
	if d := roundTrip(t, dial(t, p.Addr()), "new"); d < lat {
		t.Fatalf("round trip of a new connection with %v latency took %v", lat, d)
	}
	// A later call replaces the latency.
	if err := p.SetLatency(2 * lat); err != nil {
		t.Fatal(err)
	}
	if d := roundTrip(t, c, "more"); d < 2*lat {
		t.Fatalf("round trip with %v latency took %v", 2*lat, d)
	}
	// Latency(0) removes it.
	if err := p.SetLatency(0); err != nil {
		t.Fatal(err)
	}
	if d := roundTrip(t, c, "fast"); d >= 2*lat {
		t.Fatalf("round trip without latency took %v", d)
	}
}

// TestLatencyDoesNotThrottle sends many separate chunks while the latency
// holds replies back: they all wait at once, instead of one after another.
func TestLatencyDoesNotThrottle(t *testing.T) {
	s := newServer(t, "")
	p := newProxy(t, s.addr())
	const lat = 300 * time.Millisecond
	p.SetLatency(lat)
	c := dial(t, p.Addr())
	const n = 20
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if _, err := fmt.Fprintf(c, "%02d", i); err != nil {
				errc <- err
				return
			}
			time.Sleep(10 * time.Millisecond) // separate chunks
		}
		errc <- nil
	}()
	var want strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&want, "%02d", i)
	}
	expectRead(t, c, want.String())
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// Sequential delays would take n*lat = 6s.
	if d := time.Since(start); d < lat || d > n*lat/2 {
		t.Fatalf("%d chunks with %v latency took %v", n, lat, d)
	}
}

// TestLatencyKeepsOrder streams numbered lines while the latency goes up and
// down: every line comes back once, in order.
func TestLatencyKeepsOrder(t *testing.T) {
	s := newServer(t, "")
	p := newProxy(t, s.addr())
	c := dial(t, p.Addr())
	const n = 2000
	errc := make(chan error, 1)
	go func() {
		w := bufio.NewWriter(c)
		for i := 0; i < n; i++ {
			switch i {
			case 200:
				p.SetLatency(200 * time.Millisecond)
			case 400:
				p.SetLatency(0) // later chunks are due before earlier ones
			case 1000:
				p.SetLatency(50 * time.Millisecond)
			case 1500:
				p.SetLatency(time.Millisecond)
			}
			fmt.Fprintf(w, "%d\n", i)
			if i%10 == 0 {
				if err := w.Flush(); err != nil {
					errc <- err
					return
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		errc <- w.Flush()
	}()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	sc := bufio.NewScanner(c)
	for i := 0; i < n; i++ {
		if !sc.Scan() {
			t.Fatalf("line %d: %v", i, sc.Err())
		}
		if want := fmt.Sprint(i); sc.Text() != want {
			t.Fatalf("line %q, want %q", sc.Text(), want)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestBlackholeAndHeal(t *testing.T) {
	s := newServer(t, "")
	p := newProxy(t, s.addr())
	old := dial(t, p.Addr())
	roundTrip(t, old, "before")

	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	if err := p.Blackhole(); err != nil { // again: nothing changes
		t.Fatal(err)
	}
	if !p.Blackholed() {
		t.Fatal("not Blackholed")
	}
	// An existing connection: the request is dropped, nothing comes back,
	// the connection stays open.
	if _, err := io.WriteString(old, "lost"); err != nil {
		t.Fatal(err)
	}
	expectSilence(t, old, 300*time.Millisecond)
	if got := s.received.Load(); got != int64(len("before")) {
		t.Fatalf("server received %d bytes, want %d", got, len("before"))
	}
	// A new connection is accepted, never answered, and never reaches the
	// server.
	fresh := dial(t, p.Addr())
	if _, err := io.WriteString(fresh, "hello?"); err != nil {
		t.Fatal(err)
	}
	expectSilence(t, fresh, 300*time.Millisecond)
	if got := s.accepted.Load(); got != 1 {
		t.Fatalf("server accepted %d connections through a blackhole, want 1", got)
	}
	waitFor(t, "2 connections", func() bool { return p.Conns() == 2 })

	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	if p.Blackholed() {
		t.Fatal("Blackholed after Heal")
	}
	// Both connections went through the blackhole: they are reset, on the
	// server side too.
	expectClosed(t, old)
	expectClosed(t, fresh)
	waitFor(t, "the server side to end", func() bool { return s.ended.Load() == 1 })
	// New connections work.
	roundTrip(t, dial(t, p.Addr()), "after")
}

// TestBlackholeDropsDelayed checks that bytes waiting out a latency when the
// blackhole starts are dropped too.
func TestBlackholeDropsDelayed(t *testing.T) {
	s := newServer(t, "")
	p := newProxy(t, s.addr())
	c := dial(t, p.Addr())
	roundTrip(t, c, "x")
	p.SetLatency(500 * time.Millisecond)
	if _, err := io.WriteString(c, "delayed"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to echo", func() bool { return s.received.Load() == int64(len("x")+len("delayed")) })
	p.Blackhole()
	expectSilence(t, c, time.Second)
	p.Heal()
	expectClosed(t, c)
}

// TestBlackholeHoldsClose checks that a close during a blackhole does not
// get through: the other side stays open until Heal resets it.
func TestBlackholeHoldsClose(t *testing.T) {
	s := newServer(t, "")
	p := newProxy(t, s.addr())
	c := dial(t, p.Addr())
	roundTrip(t, c, "x")
	p.Blackhole()
	c.Close()
	time.Sleep(200 * time.Millisecond)
	if got := s.ended.Load(); got != 0 {
		t.Fatal("the server saw a close through a blackhole")
	}
	p.Heal()
	waitFor(t, "the server side to end", func() bool { return s.ended.Load() == 1 })
	waitFor(t, "the proxy to forget the connection", func() bool { return p.Conns() == 0 })
}

// TestHealWithoutBlackhole checks that Heal removes the latency and leaves
// connections alone when there is no blackhole.
func TestHealWithoutBlackhole(t *testing.T) {
	s := newServer(t, "")
	p := newProxy(t, s.addr())
	c := dial(t, p.Addr())
	const lat = time.Second
	p.SetLatency(lat)
	if d := roundTrip(t, c, "slow"); d < lat {
		t.Fatalf("round trip with %v latency took %v", lat, d)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	if p.Latency() != 0 {
		t.Fatalf("Latency %v after Heal", p.Latency())
	}
	if d := roundTrip(t, c, "fast"); d >= lat {
		t.Fatalf("round trip after Heal took %v", d)
	}
	if got := s.accepted.Load(); got != 1 {
		t.Fatalf("server accepted %d connections, want 1", got)
	}
}

func TestReset(t *testing.T) {
	s := newServer(t, "")
	p := newProxy(t, s.addr())
	addr := p.Addr()
	a, b := dial(t, addr), dial(t, addr)
	roundTrip(t, a, "a")
	roundTrip(t, b, "b")
	p.SetLatency(20 * time.Millisecond)
	if err := p.Reset(); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, a)
	expectClosed(t, b)
	waitFor(t, "the server sides to end", func() bool { return s.ended.Load() == 2 })
	if p.Addr() != addr {
		t.Fatalf("Addr changed from %s to %s", addr, p.Addr())
	}
	// New connections work at once, and the latency is still there.
	if d := roundTrip(t, dial(t, addr), "c"); d < 20*time.Millisecond {
		t.Fatalf("latency gone after Reset: round trip %v", d)
	}
	// Reset during a blackhole keeps the blackhole.
	p.Blackhole()
	p.Reset()
	c := dial(t, addr)
	io.WriteString(c, "d")
	expectSilence(t, c, 200*time.Millisecond)
}

func TestSetUpstream(t *testing.T) {
	sa, sb := newServer(t, "A"), newServer(t, "B")
	p := newProxy(t, sa.addr())
	addr := p.Addr()
	c := dial(t, addr)
	expectRead(t, c, "A")
	roundTrip(t, c, "x")

	// The same address: nothing happens.
	if err := p.SetUpstream(sa.addr()); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, "y")

	if err := p.SetUpstream(sb.addr()); err != nil {
		t.Fatal(err)
	}
	if p.Upstream() != sb.addr() {
		t.Fatalf("Upstream %q, want %q", p.Upstream(), sb.addr())
	}
	if p.Addr() != addr {
		t.Fatalf("Addr changed from %s to %s", addr, p.Addr())
	}
	expectClosed(t, c)
	c2 := dial(t, addr)
	expectRead(t, c2, "B")
	roundTrip(t, c2, "z")
	if got := sb.accepted.Load(); got != 1 {
		t.Fatalf("new upstream accepted %d connections, want 1", got)
	}
}

// TestConcurrentFaults runs echo traffic on many connections while faults
// come and go (for the race detector too), and checks what must hold
// whatever the interleaving: every control succeeds; a reply is never
// another request's bytes; no round trip made entirely inside a blackhole
// succeeds; traffic flows again after each Heal; and once the clients have
// gone the proxy holds no connection and leaves no goroutine.
func TestConcurrentFaults(t *testing.T) {
	// Registered first, so it runs last: after the proxy and the servers
	// are closed.
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	s1, s2 := newServer(t, ""), newServer(t, "")
	p := newProxy(t, s1.addr())

	// phase is odd while a blackhole is certainly in place: it becomes odd
	// after Blackhole has returned and even before Heal is called.
	var phase atomic.Int64
	var ok, failed, wrong, insideHole atomic.Int64
	var firstWrong atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopClients := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopClients) // when a check below gives up
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
				if err != nil {
					failed.Add(1)
					continue
				}
				for j := 0; j < 5; j++ {
					seq++
					msg := fmt.Sprintf("w%d-%08d;", w, seq)
					before := phase.Load()
					c.SetDeadline(time.Now().Add(2 * time.Second))
					if _, err := io.WriteString(c, msg); err != nil {
						failed.Add(1)
						break
					}
					got := make([]byte, len(msg))
					if _, err := io.ReadFull(c, got); err != nil {
						failed.Add(1)
						break
					}
					if string(got) != msg {
						wrong.Add(1)
						firstWrong.CompareAndSwap(nil, fmt.Sprintf("sent %q, read back %q", msg, got))
						break
					}
					if after := phase.Load(); after == before && after%2 == 1 {
						insideHole.Add(1)
					}
					ok.Add(1)
				}
				c.Close()
			}
		}()
	}
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	for i := 0; i < 50; i++ {
		switch i % 5 {
		case 0:
			check("SetLatency", p.SetLatency(time.Duration(i%3)*time.Millisecond))
		case 1:
			check("Blackhole", p.Blackhole())
			phase.Add(1)
		case 2:
			phase.Add(1)
			healed := ok.Load()
			check("Heal", p.Heal())
			waitFor(t, fmt.Sprintf("a round trip after Heal %d", i/5), func() bool { return ok.Load() > healed })
		case 3:
			check("Reset", p.Reset())
		case 4:
			up := s1.addr()
			if i%10 == 4 {
				up = s2.addr()
			}
			check("SetUpstream", p.SetUpstream(up))
		}
		time.Sleep(5 * time.Millisecond)
	}
	check("Heal", p.Heal())
	healed := ok.Load()
	waitFor(t, "a round trip after the last Heal", func() bool { return ok.Load() > healed })
	stopClients()
	t.Logf("%d round trips, %d failed by the faults", ok.Load(), failed.Load())
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d replies held other bytes than their request, first: %s", n, firstWrong.Load())
	}
	if n := insideHole.Load(); n > 0 {
		t.Errorf("%d round trips succeeded entirely inside a blackhole", n)
	}
	if s1.accepted.Load() == 0 || s2.accepted.Load() == 0 {
		t.Errorf("SetUpstream: upstreams accepted %d and %d connections, want both some", s1.accepted.Load(), s2.accepted.Load())
	}
	waitFor(t, "the proxy to drop the connections the clients closed", func() bool { return p.Conns() == 0 })
}

// TestClose checks that Close closes every connection, whatever its state,
// leaves no goroutine behind, and that the proxy is unusable afterwards.
func TestClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := newServer(t, "")
	p, err := New(s.addr())
	if err != nil {
		t.Fatal(err)
	}
	// A connection in each state: plain (then held by the blackhole), with
	// a reply waiting out a latency, and accepted inside a blackhole.
	plain, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	roundTrip(t, plain, "a")
	p.SetLatency(time.Hour)
	delayed, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer delayed.Close()
	io.WriteString(delayed, "later")
	waitFor(t, "the server to echo", func() bool { return s.received.Load() == int64(len("a")+len("later")) })
	p.Blackhole()
	held, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	io.WriteString(held, "x")
	waitFor(t, "3 connections", func() bool { return p.Conns() == 3 })

	addr := p.Addr()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []net.Conn{plain, delayed, held} {
		expectClosed(t, c)
	}
	if p.Conns() != 0 {
		t.Fatalf("%d connections after Close", p.Conns())
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("the proxy still accepts connections after Close")
	}
	for name, f := range map[string]func() error{
		"Close":       p.Close,
		"Reset":       p.Reset,
		"Heal":        p.Heal,
		"Blackhole":   p.Blackhole,
		"SetLatency":  func() error { return p.SetLatency(0) },
		"SetUpstream": func() error { return p.SetUpstream("127.0.0.1:1") },
	} {
		if err := f(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	s.close()
}
