package pgrouted

import (
	"context"
	"database/sql/driver"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/circuit"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/topology"
)

// host is one server of the DSN and everything the Connector keeps about
// it: its connection pool for replica reads, how it opens primary
// sessions, its circuit breaker, the replay position last read on one of
// its data connections, its in-flight reads and its statement counters.
// What the probes see of it (role, positions, RTT) is in the topology
// snapshot, at the same index.
type host struct {
	dsn.Host // name, address, weight and pgx configuration

	idx      int              // its index in the DSN and in topology snapshots
	pool     *pgxpool.Pool    // replica reads borrow connections from it
	replicas driver.Connector // borrows a connection from pool
	sessions driver.Connector // opens a primary session on the host
	breaker  *circuit.Breaker // fed by probes and by data-path failures
	maxConns int64            // the size of pool

	// known is a replay position read on a data connection (the inline
	// check), valid while the probe connection it was read alongside is
	// the same.
	known atomic.Pointer[knownReplay]
	// missed is the last position a replica wait on it did not see in
	// time (replicawait.go).
	missed atomic.Pointer[waitMiss]
	// flight is the replica connections borrowed now.
	flight hostFlight
	// descs are the statement descriptions read on it, for the pipelined
	// paths (see descCache).
	descs descCache
	// statements counts the statements run on it, per op (see Stats).
	statements [len(opNames)]atomic.Uint64
}

// newHost builds host i of cfg: its breaker (whose changes go to
// onChange) and its pool, which opens connections on demand.
func newHost(i int, h dsn.Host, cfg *dsn.Config, onChange func(circuit.Change)) (*host, error) {
	hs := &host{Host: h, idx: i}
	pc, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, fmt.Errorf("pgrouted: pool for %s: %w", h.Name, err)
	}
	pc.ConnConfig = h.ConnConfig.Copy()
	if pc.ConnConfig.ConnectTimeout == 0 {
		// A host that stopped answering must not hold a read or a write
		// for ever: without connect_timeout, give up after
		// DefaultConnectTimeout.
		pc.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.ReplicaMaxConns > 0 {
		pc.MaxConns = cfg.ReplicaMaxConns
	}
	hs.maxConns = int64(pc.MaxConns)
	hs.breaker, err = circuit.New(h.Name, circuit.Config{
		Failures:   cfg.CircuitFailures,
		Interval:   cfg.ProbeInterval,
		MaxBackoff: cfg.CircuitMaxBackoff,
		OnChange:   onChange,
	})
	if err != nil {
		return nil, fmt.Errorf("pgrouted: circuit for %s: %w", h.Name, err)
	}
	// A primary session may be needed the moment the host answers again:
	// it dials whatever the circuit says.
	hs.sessions = stdlib.GetConnector(*pc.ConnConfig.Copy())
	// No replica connection, nor pgx's cancel request after a broken read,
	// dials a host whose circuit is open: it would only wait for a host
	// known not to answer.
	dial, b, name := pc.ConnConfig.DialFunc, hs.breaker, h.Name
	pc.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !b.Allow() {
			return nil, fmt.Errorf("pgrouted: %s: circuit open", name)
		}
		return dial(ctx, network, addr)
	}
	hs.pool, err = pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("pgrouted: pool for %s: %w", h.Name, err)
	}
	hs.replicas = stdlib.GetPoolConnector(hs.pool)
	return hs, nil
}

// inflight is the number of replica reads running on the host now.
func (h *host) inflight() int64 { return h.flight.n.Load() }

// knownReplay is a standby's replay position read on a data connection.
type knownReplay struct {
	conn uint64 // the host's probe connection incarnation when it was read
	lsn  lagmeter.LSN
}

// replay is what is known of the standby's replay position, given st, its
// state in the current snapshot: the last probe's, or a later one read by
// an inline check since, while the host's probe connection has not changed
// (a restart can take a standby back to its minimum recovery point).
func (h *host) replay(st *topology.HostState) lagmeter.LSN {
	if k := h.known.Load(); k != nil && k.conn == st.Conn && k.lsn > st.ReplayLSN {
		return k.lsn
	}
	return st.ReplayLSN
}

// noteReplay records a replay position read on a data connection while the
// host's probe connection was conn.
func (h *host) noteReplay(conn uint64, lsn lagmeter.LSN) {
	for {
		cur := h.known.Load()
		if cur != nil && cur.conn == conn && cur.lsn >= lsn {
			return
		}
		if h.known.CompareAndSwap(cur, &knownReplay{conn: conn, lsn: lsn}) {
			return
		}
	}
}

// dropIdle closes the network connections under the host's idle pooled
// connections without a goodbye: the host does not answer, and a polite
// close would wait for it (pgxpool waits up to 15s per connection).
func (h *host) dropIdle() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, pc := range h.pool.AcquireAllIdle(ctx) {
		pc.Conn().PgConn().Conn().Close()
		pc.Release()
	}
}

// hostFlight is a host's borrowed connections, so that reads stuck on a host
// that stopped answering can be interrupted when its circuit opens.
type hostFlight struct {
	n     atomic.Int64 // in-flight reads, for selection and observation
	mu    sync.Mutex
	conns map[*borrowed]struct{}
}

func (f *hostFlight) add(b *borrowed) {
	f.n.Add(1)
	f.mu.Lock()
	if f.conns == nil {
		f.conns = make(map[*borrowed]struct{})
	}
	f.conns[b] = struct{}{}
	f.mu.Unlock()
}

func (f *hostFlight) remove(b *borrowed) {
	f.mu.Lock()
	if _, ok := f.conns[b]; ok {
		delete(f.conns, b)
		f.n.Add(-1)
	}
	f.mu.Unlock()
}

// abort closes the network connection under every borrowed connection: a
// read waiting on a host that stopped answering fails at once, and runs
// elsewhere if no row reached the caller yet.
func (f *hostFlight) abort() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for b := range f.conns {
		b.Conn.Conn().PgConn().Conn().Close()
	}
	return len(f.conns)
}
