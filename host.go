package pgrouted

import (
	"context"
	"database/sql/driver"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/circuit"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
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

	// caches says which of pgx's statement caches pgrouted sizes for the
	// connections it opens to the host (see sizeCaches).
	caches cacheSizing

	// poolerLogged is set once the pooler in front of it was logged
	// (txpooler.go).
	poolerLogged atomic.Bool

	// known is a replay position read on a data connection (the inline
	// check), valid while the probe connection it was read alongside is
	// the same.
	known atomic.Pointer[knownReplay]
	// leads is set while the host is the primary of the current term
	// (term.go): only then may a primary session dial it.
	leads atomic.Bool

	// catchUp is the record of its position checks by the age of the
	// write they looked for (consistency.CatchUp).
	catchUp consistency.CatchUp

	// gate is its state against the staleness budget: hysteresis and
	// ramp (budgetgate.go).
	gate budgetGate

	// missed is the last position a replica wait on it did not see in
	// time (replicawait.go).
	missed atomic.Pointer[waitMiss]
	// waits are its slots for reads that wait on it (replicawait.go).
	waits waitSlots
	// pace is what its probes showed of its replay's progress
	// (replicawait.go).
	pace replayPace
	// flight is the replica connections borrowed now.
	flight hostFlight
	// descs are the statement descriptions read on it, for the pipelined
	// paths (see pgpipe.Descs): valid on this host in the default session
	// state (see conn.descsOf).
	descs pgpipe.Descs
	// statements counts the statements run on it, per op (see Stats).
	statements [len(opNames)]atomic.Uint64

	// discovered is set for a host the topology provider reported that the
	// DSN does not name (pgrouted_discover); removed once it left the
	// provider's view (its pool is then closed after draining).
	discovered bool
	removed    atomic.Bool
}

// newHost builds host i of cfg: its breaker (whose changes go to
// onChange) and its pool, which opens connections on demand. wire, when
// not nil, tells whether the host answered a probe yet and, if so, whether
// pgx's own path runs in cache_describe mode on it (Connector.describeOnly):
// every connection opened to the host sizes its statement caches by it
// (sizeCaches).
func newHost(i int, h dsn.Host, cfg *dsn.Config, onChange func(circuit.Change), wire func(*host) (probed, describeOnly bool)) (*host, error) {
	hs := &host{Host: h, idx: i, caches: newCacheSizing(h.ConnConfig)}
	sizeCaches := func(_ context.Context, cc *pgx.ConnConfig) error {
		if wire != nil {
			probed, describe := wire(hs)
			hs.caches.apply(cc, probed, describe)
		}
		return nil
	}
	pc, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, fmt.Errorf("pgrouted: pool for %s: %w", dsn.Printable(h.Name), err)
	}
	pc.ConnConfig = h.ConnConfig.Copy()
	boundConnect(&pc.ConnConfig.Config)
	replicaPool(pc, cfg)
	hs.maxConns = int64(pc.MaxConns)
	hs.breaker, err = circuit.New(h.Name, circuit.Config{
		Failures:   cfg.CircuitFailures,
		Interval:   cfg.ProbeInterval,
		MaxBackoff: cfg.CircuitMaxBackoff,
		OnChange:   onChange,
	})
	if err != nil {
		return nil, fmt.Errorf("pgrouted: circuit for %s: %w", dsn.Printable(h.Name), err)
	}
	hs.sessions = sessionConnector(hs, pc.ConnConfig, sizeCaches)
	pc.BeforeConnect = sizeCaches
	guardReplicaDials(hs, pc)
	hs.pool, err = pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("pgrouted: pool for %s: %w", dsn.Printable(h.Name), err)
	}
	hs.replicas = stdlib.GetPoolConnector(hs.pool)
	return hs, nil
}

// sessionConnector returns the connector that opens hs's primary
// sessions on a copy of cc, the host's connection configuration (taken
// before guardReplicaDials wraps the replica pool's dial), with their
// caches sized by sizeCaches. It dials only while hs is the primary of the
// current term, and never pings a session it reuses.
func sessionConnector(hs *host, cc *pgx.ConnConfig, sizeCaches func(context.Context, *pgx.ConnConfig) error) driver.Connector {
	// A primary session may be needed the moment the host answers again:
	// it dials whatever the circuit says, while the host is the primary of
	// the current term (term.go). Once it is not, pgx's cancel request
	// after a session was interrupted is not sent: the host may not
	// answer it.
	sc := cc.Copy()
	sdial, name := sc.DialFunc, hs.Name
	sc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !hs.leads.Load() {
			return nil, fmt.Errorf("%w: %s", errNotPrimary, dsn.Printable(name))
		}
		return sdial(ctx, network, addr)
	}
	// A primary session is not pinged when database/sql or a Pool reuses
	// its connection (pgx's stdlib pings one idle over a second): the
	// next statement may be a read a replica serves, which would wait for
	// the primary's answer, and for as long as a frozen primary's term
	// lasts. The statement that uses the session finds it broken instead:
	// the term's end closes it (term.go), and a statement on a session
	// the server ended runs again on a new one (primaryFailed).
	return stdlib.GetConnector(*sc, stdlib.OptionBeforeConnect(sizeCaches),
		stdlib.OptionShouldPing(func(context.Context, stdlib.ShouldPingParams) bool { return false }))
}

// guardReplicaDials makes pc, the configuration of hs's replica pool, dial
// only while hs's circuit is closed, and track each connection being
// opened in hs's flight until pgx has finished opening it.
func guardReplicaDials(hs *host, pc *pgxpool.Config) {
	// No replica connection, nor pgx's cancel request after a broken read,
	// dials a host whose circuit is open: it would only wait for a host
	// known not to answer.
	// A connection being opened is tracked until pgx has finished opening
	// it, so that a read waiting for that (on a host that accepts
	// connections and then answers nothing) is released too when the
	// circuit opens.
	dial, b, name := pc.ConnConfig.DialFunc, hs.breaker, dsn.Printable(hs.Name)
	pc.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !b.Allow() {
			return nil, fmt.Errorf("pgrouted: %s: circuit open", name)
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return hs.flight.opening(c), nil
	}
	pc.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		hs.flight.opened(conn.PgConn().Conn())
		return nil
	}
}

// replicaPool gives pc, a host's replica pool's configuration, the
// pgrouted_replica_ settings of cfg; a zero one leaves pgxpool's default
// (and MaxConns, pgrouted's: dsn.DefaultReplicaMaxConns).
func replicaPool(pc *pgxpool.Config, cfg *dsn.Config) {
	pc.MaxConns = dsn.DefaultReplicaMaxConns
	if cfg.ReplicaMaxConns > 0 {
		pc.MaxConns = cfg.ReplicaMaxConns
	}
	pc.MinConns, pc.MinIdleConns = cfg.ReplicaMinConns, cfg.ReplicaMinIdleConns
	pc.MaxConnLifetimeJitter = cfg.ReplicaMaxConnLifetimeJitter
	for _, d := range []struct{ to, from *time.Duration }{
		{&pc.MaxConnLifetime, &cfg.ReplicaMaxConnLifetime},
		{&pc.MaxConnIdleTime, &cfg.ReplicaMaxConnIdleTime},
		{&pc.HealthCheckPeriod, &cfg.ReplicaHealthCheckPeriod},
	} {
		if *d.from > 0 {
			*d.to = *d.from
		}
	}
}

// boundConnect gives cfg, a copy of a host's configuration, a connect
// timeout when the DSN has none: DefaultConnectTimeout. A host that stopped
// answering must not hold a read, a write or a probe for ever.
func boundConnect(cfg *pgconn.Config) {
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
}

// pgx keeps two caches of statement descriptions on every connection, each
// a map made at its full capacity when the connection opens (about 28 KiB
// at pgx's default of 512 entries: most of a connection's heap): the
// statement cache of cache_statement mode (named prepared statements) and
// the description cache of cache_describe mode (the unnamed statement).
// pgx's own path on a connection uses one of them, by the exec mode: in
// pgx's default mode, cache_statement, except on a host behind a
// connection pooler, where pgrouted asks for cache_describe (txpooler.go). So
// once a host has answered a probe, a connection opened to it gets the
// cache it will not use at a small capacity (smallCacheCapacity): still
// there for a statement that asks for the other mode by argument, whose
// descriptions beyond it are read again. A capacity the DSN sets
// (statement_cache_capacity, description_cache_capacity) or a non-default
// exec mode (default_query_exec_mode) is left as it is, and so are the
// connections opened before the host's first probe answered.

// pgxCacheCapacity is pgx's default capacity of both caches.
const pgxCacheCapacity = 512

// smallCacheCapacity is the capacity of the cache a connection's exec mode
// does not use (about 1 KiB, against 28 KiB at 512).
const smallCacheCapacity = 16

// cacheSizing says which of a host's pgx caches pgrouted may size: the
// ones its configuration leaves at pgx's default, under pgx's default
// exec mode.
type cacheSizing struct {
	statements, descriptions bool
}

// newCacheSizing is the sizing of the caches of connections configured by
// cc: a capacity other than pgx's default, or a key naming it in the
// connection string (where it may say 512), is the user's.
func newCacheSizing(cc *pgx.ConnConfig) cacheSizing {
	if cc == nil || cc.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return cacheSizing{}
	}
	s := cc.ConnString()
	return cacheSizing{
		statements:   cc.StatementCacheCapacity == pgxCacheCapacity && !strings.Contains(s, "statement_cache_capacity"),
		descriptions: cc.DescriptionCacheCapacity == pgxCacheCapacity && !strings.Contains(s, "description_cache_capacity"),
	}
}

// apply sizes the caches of cc, a connection about to be opened, for a
// host that answered a probe (probed) and on which pgx's own path runs in
// cache_describe mode (describeOnly) or not.
func (s cacheSizing) apply(cc *pgx.ConnConfig, probed, describeOnly bool) {
	switch {
	case !probed:
	case describeOnly && s.statements:
		cc.StatementCacheCapacity = smallCacheCapacity
	case !describeOnly && s.descriptions:
		cc.DescriptionCacheCapacity = smallCacheCapacity
	}
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

// wire reports whether h answered a probe yet and, if so, whether pgx's
// own path runs in cache_describe mode on it (describeOnly): what the
// statement caches of a connection opened to h are sized by.
func (c *Connector) wire(h *host) (probed, describeOnly bool) {
	if !c.started.Load() {
		return false, false
	}
	hv := c.view().of(h)
	if hv == nil || hv.probe.LastSuccess.IsZero() {
		return false, false
	}
	return true, c.describeOnly(h)
}
