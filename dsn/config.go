package dsn

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Consistency is what a read on a replica must see (pgrouted_consistency).
type Consistency string

// The values of pgrouted_consistency.
const (
	// ConsistencySession: a read sees the writes the same session made
	// before it (read-your-writes by LSN watermark).
	ConsistencySession Consistency = "session"
	// ConsistencyEventual: a read may run on any replica inside the lag
	// budget, whatever the session wrote.
	ConsistencyEventual Consistency = "eventual"
	// ConsistencyGlobal: a read sees every transaction committed on the
	// primary before it began, by any client of the cluster (another
	// process, psql): the read learns the primary's WAL position after it
	// began, and a replica serves it only once it has replayed that
	// position. Concurrent reads share one position read.
	ConsistencyGlobal Consistency = "global"
	// ConsistencyCausal: read-your-writes, monotonic reads and
	// writes-follow-reads within a scope (a Session, else the process's
	// relations): each read records an upper bound of the WAL position it
	// saw, read in its own round trip, and the scope's next read needs a
	// replica that has replayed it.
	ConsistencyCausal Consistency = "causal"
)

// SelectPolicy is how a replica is chosen among the eligible ones
// (pgrouted_select). Every policy but nearest chooses among the replicas
// inside the latency window ([Config.LatencyWindow]).
type SelectPolicy string

// The values of pgrouted_select.
const (
	// SelectRoundRobin takes the eligible replicas in turn.
	SelectRoundRobin SelectPolicy = "round-robin"
	// SelectWeighted gives each eligible replica a share of the reads in
	// proportion to its [Host.Weight], in a fixed interleaved order (a
	// stride through the weights), not at random.
	SelectWeighted SelectPolicy = "weighted"
	// SelectLeastInflight takes the less busy (fewer statements running)
	// of two eligible replicas drawn at random: the power of two choices.
	SelectLeastInflight SelectPolicy = "least-inflight"
	// SelectNearest takes the replica with the lowest probe round trip;
	// the latency window does not apply.
	SelectNearest SelectPolicy = "nearest"
	// SelectRandom picks uniformly at random.
	SelectRandom SelectPolicy = "random"
)

// FallbackPolicy is what a read does when no replica is eligible
// (pgrouted_fallback).
type FallbackPolicy string

// The values of pgrouted_fallback.
const (
	// FallbackPrimary runs the read on the primary.
	FallbackPrimary FallbackPolicy = "primary"
	// FallbackError fails the read with the reason no replica was eligible.
	FallbackError FallbackPolicy = "error"
)

// ReadOnlyTxRoute is where a read-only transaction runs (pgrouted_readonly_tx).
type ReadOnlyTxRoute string

// The values of pgrouted_readonly_tx.
const (
	// ReadOnlyTxReplica runs a read-only transaction on a replica.
	ReadOnlyTxReplica ReadOnlyTxRoute = "replica"
	// ReadOnlyTxPrimary runs every transaction on the primary.
	ReadOnlyTxPrimary ReadOnlyTxRoute = "primary"
)

// LatencyWindowOff is the [Config.LatencyWindow] that turns the latency
// window off (pgrouted_latency_window=off): replicas are not filtered by
// round-trip time at all.
const LatencyWindowOff time.Duration = -1

// WriteNoWait is the [Config.WriteTimeout] that fails a write at once when
// there is no primary (pgrouted_write_timeout=0); a zero WriteTimeout is
// the default, [DefaultWriteTimeout].
const WriteNoWait time.Duration = -1

// The defaults. A zero field of a [Config] means its default: [Parse] and
// [Config.SetDefaults] put these in its place, [Config.Validate] and
// [Format] read a zero field as its default, and Format leaves out every
// routing key whose value is its default. So a Config built in code needs
// only its Hosts.
const (
	// DefaultConsistency is the default of pgrouted_consistency.
	DefaultConsistency = ConsistencySession

	// DefaultMaxLag is the default time budget of pgrouted_max_lag while
	// pgrouted_probe_interval is 10s or less; with a longer ProbeInterval
	// the default is three probe intervals (see [Config.MaxLag]).
	// pgrouted_max_lag=none removes the budget.
	//
	// Why 30s: the budget is what keeps reads off a replica that fell
	// minutes or hours behind (replication stopped, replay stuck behind a
	// conflicting query or a slow apply) instead of serving them stale
	// data without a word. It must not take a healthy replica out: a
	// caught-up replica's staleness bound reaches about two probe intervals
	// when the primary is written to between probes, and a busy machine
	// delays probes by a few more. 30s is 30 probe intervals at the
	// default 1s, far from both; it is PostgreSQL's own
	// max_standby_streaming_delay (30s), the longest a standby's replay may
	// wait for a conflicting query by default, and Vitess's
	// discovery_low_replication_lag (30s), its line between a healthy and a
	// lagging replica. An application that needs fresher reads sets a
	// smaller budget, or a per-request one with WithMaxLag in package
	// pgrouted (the smaller wins).
	DefaultMaxLag = 30 * time.Second

	// DefaultProbeInterval is the default of pgrouted_probe_interval.
	DefaultProbeInterval = 1 * time.Second
	// DefaultSelectPolicy is the default of pgrouted_select.
	DefaultSelectPolicy = SelectRoundRobin
	// DefaultLatencyWindow is the default of pgrouted_latency_window (see
	// [Config.LatencyWindow] for how it widens with the fastest replica's
	// round trip).
	DefaultLatencyWindow = 20 * time.Millisecond
	// DefaultWeight is the default of each pgrouted_weights entry.
	DefaultWeight = 1
	// DefaultFallback is the default of pgrouted_fallback.
	DefaultFallback = FallbackPrimary
	// DefaultReadOnlyTx is the default of pgrouted_readonly_tx.
	DefaultReadOnlyTx = ReadOnlyTxReplica
	// DefaultPinAfterWrite is the default of pgrouted_pin_after_write: off.
	DefaultPinAfterWrite time.Duration = 0
	// DefaultWriteTimeout is the default of pgrouted_write_timeout.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultLease is the default of pgrouted_lease.
	DefaultLease = 10 * time.Second

	// DefaultReplicaMaxConns is the default of pgrouted_replica_max_conns:
	// each replica's pool holds up to 10 connections, opened on demand.
	//
	// Why 10: a number, the same on every machine (pgxpool's own default,
	// max(4, runtime.NumCPU()), is 4 on a laptop and 64 on a large
	// server). It is the most reads a process runs on one replica at once;
	// when every replica's pool is busy a read goes to the primary
	// (reason saturated), so a pool too small moves reads to the primary
	// under load. It is also what one process may cost a replica: with
	// PostgreSQL's default max_connections of 100, ten processes fill a
	// replica. 10 is HikariCP's default pool size, which has served as a
	// sane default for years; raise it for processes with more concurrent
	// reads, lower it when many processes share a replica.
	DefaultReplicaMaxConns int32 = 10

	// DefaultMaxConnLifetime, DefaultMaxConnIdleTime and
	// DefaultHealthCheckPeriod are pgxpool's defaults, and the defaults
	// of pgrouted_replica_max_conn_lifetime,
	// pgrouted_replica_max_conn_idle_time and
	// pgrouted_replica_health_check_period. DefaultHealthCheckPeriod is
	// pool_health_check_period's too; the primary's sessions have no
	// lifetime or idle time unless pool_max_conn_lifetime or
	// pool_max_conn_idle_time sets one.
	DefaultMaxConnLifetime   = time.Hour
	DefaultMaxConnIdleTime   = 30 * time.Minute
	DefaultHealthCheckPeriod = time.Minute

	// DefaultCircuitFailures is the default of pgrouted_circuit_failures.	// DefaultCircuitFailures is the default of pgrouted_circuit_failures.
	DefaultCircuitFailures = 2
	// DefaultCircuitMaxBackoff is the default of
	// pgrouted_circuit_max_backoff while pgrouted_probe_interval is 30s or
	// less; with a longer ProbeInterval the default is the probe interval
	// (see [Config.CircuitMaxBackoff]).
	DefaultCircuitMaxBackoff = 30 * time.Second
	// DefaultStrictBoot is the default of pgrouted_strict_boot.
	DefaultStrictBoot = false
	// DefaultReplicaWait is the default of pgrouted_replica_wait: off.
	DefaultReplicaWait time.Duration = 0
	// DefaultPrimaryReadLimit is the default of
	// pgrouted_primary_read_limit: 0, no limit. pgrouted cannot know what
	// the primary can take beside its writes, and a limit turns fallback
	// reads into errors past it, which an application must be ready to
	// retry: it is the application's choice (docs/routing.md suggests a
	// fraction of the primary's connections or cores).
	DefaultPrimaryReadLimit = 0
	// MaxPrimaryReadLimit is the largest pgrouted_primary_read_limit.
	MaxPrimaryReadLimit = 10000
)

// rulePrimaryReadLimit is pgrouted_primary_read_limit's rule.
var rulePrimaryReadLimit = fmt.Sprintf("must be a whole number from 0 (no limit) to %d", MaxPrimaryReadLimit)

// lagIntervals is how many probe intervals the default time budget spans at
// least: a caught-up replica's bound reaches about two, one more is for a
// late probe.
const lagIntervals = 3

// LagBudget is how far behind the primary a replica may be and still serve
// reads (pgrouted_max_lag): a time, a number of WAL bytes, or none. The zero
// value is unset: [Config.SetDefaults] puts the default time budget in its
// place. LagBudget values compare with ==.
type LagBudget struct {
	kind lagKind
	n    int64 // nanoseconds or bytes, by kind
}

type lagKind uint8

const (
	lagUnset lagKind = iota
	lagNone
	lagTime
	lagBytes
)

// LagNone returns no budget: staleness does not gate reads
// (pgrouted_max_lag=none).
func LagNone() LagBudget { return LagBudget{kind: lagNone} }

// LagTime returns a budget of time: a replica may serve a read while it is
// at most d behind.
func LagTime(d time.Duration) LagBudget { return LagBudget{kind: lagTime, n: int64(d)} }

// LagBytes returns a budget of WAL bytes: a replica may serve a read while
// its replay position is at most n bytes behind the primary's.
func LagBytes(n int64) LagBudget { return LagBudget{kind: lagBytes, n: n} }

// IsNone reports whether b is [LagNone]: staleness does not gate reads.
func (b LagBudget) IsNone() bool { return b.kind == lagNone }

// Time returns the budget and true when it is a time budget.
func (b LagBudget) Time() (time.Duration, bool) {
	return time.Duration(b.n), b.kind == lagTime
}

// Bytes returns the budget and true when it is a byte budget.
func (b LagBudget) Bytes() (int64, bool) { return b.n, b.kind == lagBytes }

// String returns the budget as a pgrouted_max_lag value ("2s", "16MB",
// "none"), or "" when it is unset.
func (b LagBudget) String() string {
	switch b.kind {
	case lagTime:
		return formatDuration(time.Duration(b.n))
	case lagBytes:
		return formatSize(b.n)
	case lagNone:
		return "none"
	}
	return ""
}

// MarshalText implements encoding.TextMarshaler with the form of [LagBudget.String].
func (b LagBudget) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: it accepts what
// pgrouted_max_lag accepts, and "" for unset.
func (b *LagBudget) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*b = LagBudget{}
		return nil
	}
	v, err := parseLagBudget(string(text))
	if err != nil {
		return &ParseError{Key: keyMaxLag, msg: keyMaxLag + " (" + string(text) + ") " + lagRule(string(text), err)}
	}
	*b = v
	return nil
}

// Host is one server of the cluster. Which one is the primary is not part of
// the configuration: it is found by probing.
type Host struct {
	// Name identifies the host in route events, logs, topology snapshots
	// and metrics: from pgrouted_names; "" means the Addr. Names are
	// unique (ignoring case), valid UTF-8 without commas, surrounding
	// space, or control, format (U+202E RIGHT-TO-LEFT OVERRIDE) or line
	// separator characters, and "primary" is reserved.
	Name string

	// Addr is where the host listens: "host:port" (an IPv6 address in
	// brackets, "[::1]:5432") or, for a unix socket, the socket's path
	// ("/var/run/postgresql/.s.PGSQL.5432"), as [github.com/jackc/pgx/v5/pgconn.NetworkAddress]
	// gives it. Like a Name, it must be valid UTF-8 without control,
	// format or line separator characters, and so must the ConnConfig's
	// Host.
	Addr string

	// Weight is the host's share of reads under pgrouted_select=weighted,
	// from pgrouted_weights: 1 to [MaxWeight] (1000000); 0 means
	// [DefaultWeight].
	Weight int

	// ConnConfig is a complete pgx configuration for this host alone: its
	// own Host and Port, Fallbacks holding only this host's alternates (the
	// TLS-then-plain pair of sslmode=prefer, the plain-then-TLS pair of
	// sslmode=allow), and the credentials, TLS settings and runtime
	// parameters that the connection string gives every host. No pgrouted_
	// key is among its RuntimeParams. Its ConnString is the connection
	// string as given to [Parse], all hosts, pgrouted_ keys and the password
	// included (as pgxpool leaves its pool_ keys in its own): pgx does not
	// parse it again, and neither should anyone else.
	ConnConfig *pgx.ConnConfig
}

// Config is a parsed pgrouted connection string: the hosts, each with its
// own pgx configuration, and the routing settings. Build one with [Parse];
// one built or changed in code is checked by [Config.Validate]. A zero
// routing field means its default (the Default constants), as in
// sony/gobreaker's Settings: a Config built in code needs only its Hosts,
// each with an Addr and a ConnConfig. Printing a Config with fmt shows
// [Config.Redacted], never a password.
type Config struct {
	// Hosts are the servers, in the order the connection string lists them.
	Hosts []Host

	// Consistency is what a read on a replica must see
	// (pgrouted_consistency, default [DefaultConsistency]).
	Consistency Consistency

	// MaxLag is the staleness budget of a replica (pgrouted_max_lag). The
	// default is a time budget of [DefaultMaxLag] (30s), or of three
	// probe intervals when ProbeInterval is longer than 10s, so that a
	// long probe interval set alone keeps a valid budget that no
	// caught-up replica exceeds; [LagNone] removes the budget. A time
	// budget must be greater than ProbeInterval and at most 24h; a byte
	// budget from 1B to 1024GB.
	MaxLag LagBudget

	// ProbeInterval is the time between two probes of a host's role,
	// position and round trip (pgrouted_probe_interval, default
	// [DefaultProbeInterval]). From 10ms to 1h.
	ProbeInterval time.Duration

	// SelectPolicy is how a replica is chosen among the eligible ones
	// (pgrouted_select, default [DefaultSelectPolicy]).
	SelectPolicy SelectPolicy

	// LatencyWindow keeps reads off the replicas that are far, by probe
	// round trip, from the fastest eligible one (pgrouted_latency_window,
	// default [DefaultLatencyWindow]): a replica is inside when its round
	// trip is at most the fastest's plus the larger of LatencyWindow and
	// the fastest's own round trip, so the window never takes out a
	// replica less than twice as slow as the fastest, and grows with it on
	// a machine where every probe is slow. A replica whose round trip is
	// not known yet is inside. Every policy but nearest chooses among the
	// replicas inside; [LatencyWindowOff] keeps all. From 100µs to 10s, or
	// LatencyWindowOff.
	LatencyWindow time.Duration

	// Fallback is what a read does when no replica is eligible
	// (pgrouted_fallback, default [DefaultFallback]).
	Fallback FallbackPolicy

	// ReadOnlyTx is where a read-only transaction runs
	// (pgrouted_readonly_tx, default [DefaultReadOnlyTx]).
	ReadOnlyTx ReadOnlyTxRoute

	// PinAfterWrite keeps a session's reads on the primary for this long
	// after its last write, on top of the LSN watermark
	// (pgrouted_pin_after_write, default [DefaultPinAfterWrite]; 0 is off).
	// 0, or from 1ms to 1h.
	PinAfterWrite time.Duration

	// WriteTimeout is how long a write waits for a primary, e.g. during a
	// failover (pgrouted_write_timeout, default [DefaultWriteTimeout]).
	// From 1ms to 1h, or [WriteNoWait] (pgrouted_write_timeout=0) to fail
	// at once when there is no primary.
	WriteTimeout time.Duration

	// Lease is how long a primary is trusted without a successful probe
	// (pgrouted_lease, default [DefaultLease]). Greater than ProbeInterval,
	// at most 2h.
	Lease time.Duration

	// ReplicaMaxConns is the size of each replica's connection pool
	// (pgrouted_replica_max_conns, default [DefaultReplicaMaxConns], 10).
	// From 1 to 10000.
	ReplicaMaxConns int32

	// ReplicaMinConns is the fewest connections each replica pool keeps
	// open, idle or not (pgrouted_replica_min_conns, pgxpool's MinConns;
	// default 0). From 0 to ReplicaMaxConns.
	ReplicaMinConns int32
	// ReplicaMinIdleConns is the fewest idle connections each replica pool
	// keeps open (pgrouted_replica_min_idle_conns, pgxpool's MinIdleConns;
	// default 0). From 0 to ReplicaMaxConns.
	ReplicaMinIdleConns int32
	// ReplicaMaxConnLifetime is how long a replica pool keeps a connection
	// from its creation (pgrouted_replica_max_conn_lifetime, pgxpool's
	// MaxConnLifetime; default [DefaultMaxConnLifetime]). From 1s to 24h.
	ReplicaMaxConnLifetime time.Duration
	// ReplicaMaxConnLifetimeJitter is the most a replica pool adds, at
	// random, to each connection's lifetime, so that they are not all
	// renewed at once (pgrouted_replica_max_conn_lifetime_jitter, pgxpool's
	// MaxConnLifetimeJitter; default 0, none). 0, or 1ms to 24h.
	ReplicaMaxConnLifetimeJitter time.Duration
	// ReplicaMaxConnIdleTime is how long a replica pool keeps a connection
	// idle (pgrouted_replica_max_conn_idle_time, pgxpool's MaxConnIdleTime;
	// default [DefaultMaxConnIdleTime]). From 1s to 24h.
	ReplicaMaxConnIdleTime time.Duration
	// ReplicaHealthCheckPeriod is the time between two health checks of a
	// replica pool's idle connections, which close the expired and open
	// the missing ones (pgrouted_replica_health_check_period, pgxpool's
	// HealthCheckPeriod; default [DefaultHealthCheckPeriod]). From 100ms
	// to 1h.
	ReplicaHealthCheckPeriod time.Duration

	// The primary's sessions, read from pgxpool's own pool_ keys. They
	// hold across the Connector, whichever face opened a session (a
	// database/sql connection's, or a Pool's), and their zero values keep
	// the primary's sessions as they were before these keys: no cap, none
	// kept open, none closed for its age or idleness.

	// PrimaryMaxConns is the most primary sessions open at once
	// (pool_max_conns, pgxpool's MaxConns; default 0, no cap). A
	// statement that needs a session when this many are open takes the
	// session of an idle connection that holds no session state, or waits
	// for one to be closed, within its context and WriteTimeout. 0, or
	// from 1 to 10000.
	PrimaryMaxConns int32
	// PrimaryMinConns is the fewest primary sessions kept open
	// (pool_min_conns, pgxpool's MinConns; default 0). From 0 to
	// PrimaryMaxConns when that is set, else to 10000.
	PrimaryMinConns int32
	// PrimaryMinIdleConns is the fewest idle primary sessions kept open
	// (pool_min_idle_conns, pgxpool's MinIdleConns; default 0). Bounded
	// as PrimaryMinConns.
	PrimaryMinIdleConns int32
	// PrimaryMaxConnLifetime is how long a primary session is kept from
	// its opening (pool_max_conn_lifetime, pgxpool's MaxConnLifetime;
	// default 0, no limit). 0, or from 1s to 24h.
	PrimaryMaxConnLifetime time.Duration
	// PrimaryMaxConnLifetimeJitter is the most added, at random, to each
	// primary session's lifetime (pool_max_conn_lifetime_jitter, pgxpool's
	// MaxConnLifetimeJitter; default 0, none). 0, or 1ms to 24h.
	PrimaryMaxConnLifetimeJitter time.Duration
	// PrimaryMaxConnIdleTime is how long a primary session that holds no
	// session state is kept idle (pool_max_conn_idle_time, pgxpool's
	// MaxConnIdleTime; default 0, no limit). 0, or from 1s to 24h.
	PrimaryMaxConnIdleTime time.Duration
	// PrimaryHealthCheckPeriod is the time between two checks of the idle
	// primary sessions, which close the expired and broken ones and open
	// the ones PrimaryMinConns and PrimaryMinIdleConns ask for
	// (pool_health_check_period, pgxpool's HealthCheckPeriod; default
	// [DefaultHealthCheckPeriod]). The checks run only when one of the
	// Primary fields is away from its default. From 100ms to 1h.
	PrimaryHealthCheckPeriod time.Duration

	// CircuitFailures is the number of failures in a row that open a host's	// CircuitFailures is the number of failures in a row that open a host's
	// circuit (pgrouted_circuit_failures, default [DefaultCircuitFailures]).
	// From 1 to 1000.
	CircuitFailures int

	// CircuitMaxBackoff is the longest wait between two probes of a host
	// whose circuit is open (pgrouted_circuit_max_backoff, default
	// [DefaultCircuitMaxBackoff], or the ProbeInterval when that is
	// longer). From the ProbeInterval to 1h: an open circuit is never
	// probed more often than a healthy host.
	CircuitMaxBackoff time.Duration

	// StrictBoot makes the first use fail while a configured host is
	// unreachable (pgrouted_strict_boot, default [DefaultStrictBoot]).
	StrictBoot bool

	// ReadFunctions are functions, VOLATILE by their label, that only read:
	// a statement calling them may run on a replica
	// (pgrouted_read_functions, a comma list; default none). Each is a
	// function name as SQL writes it, optionally schema-qualified (jitter,
	// app.jitter, app."Jitter"); an unqualified one covers every schema.
	ReadFunctions []string

	// WriteFunctions are functions that must run on the primary whatever
	// their label says (pgrouted_write_functions, a comma list, as
	// ReadFunctions; default none). A statement calling one is a write.
	WriteFunctions []string

	// Topology is where the authority on the primary comes from
	// (pgrouted_topology, default [DefaultTopology]): the probes alone, or
	// Patroni's REST API with the probes checking it.
	Topology TopologySource

	// PatroniEndpoints are Patroni REST URLs, asked in order
	// (pgrouted_patroni_endpoints, a comma list; required with
	// [TopologyPatroni], and only then). Each is http or https, and may
	// carry basic-auth userinfo, which is never shown.
	PatroniEndpoints []string

	// PatroniTimeout bounds each request to Patroni's REST API
	// (pgrouted_patroni_timeout, default [DefaultPatroniTimeout]). From
	// 10ms to 1m, and less than Lease under [TopologyPatroni].
	PatroniTimeout time.Duration

	// Discover makes the members a topology provider reports that no host
	// of the connection string names hosts as well, with the connection
	// string's user, database and TLS settings (pgrouted_discover, default
	// [DefaultDiscover]).
	Discover bool
	// DiscoverMax is the most hosts discovery keeps at once; the members
	// past it are left out (pgrouted_discover_max, default
	// [DefaultDiscoverMax]). From 1 to [MaxDiscoverMax].
	DiscoverMax int
	// ReplicaWait is how long a read may wait on a replica that has not
	// yet replayed the caller's writes for its replay to reach them,
	// instead of going to the primary (pgrouted_replica_wait, default
	// [DefaultReplicaWait]; 0 is off). 0, or from 1ms to 1h.
	ReplicaWait time.Duration
	// PrimaryReadLimit is the most fallback reads (reads no replica could
	// serve: behind, catching up, unhealthy, none) the primary runs at
	// once for this Connector (pgrouted_primary_read_limit, default
	// [DefaultPrimaryReadLimit]; 0 is no limit). A fallback read past it
	// waits, within its replica wait and its context, for a replica or a
	// slot, then fails with a retryable error. 0, or from 1 to
	// [MaxPrimaryReadLimit].
	PrimaryReadLimit int

	// src is the connection string the Config was parsed from; nil for a
	// Config built in code. A pointer, so that fmt's %v of a Config can
	// never print the password it holds.
	src *source
}

// defaultConfig returns a Config with every routing setting at its default
// and no host.
func defaultConfig() *Config {
	c := &Config{}
	c.SetDefaults()
	return c
}

// SetDefaults sets every zero routing field of c to its default, and each
// host's zero Weight and empty Name to [DefaultWeight] and its Addr, as
// [Parse] does. A zero MaxLag becomes a time budget of [DefaultMaxLag], or
// three times the ProbeInterval when that is longer; a zero
// CircuitMaxBackoff becomes [DefaultCircuitMaxBackoff], or the
// ProbeInterval when that is longer. The fields whose
// default is zero or false (PinAfterWrite, ReplicaWait, StrictBoot,
// Discover, the function lists, ReplicaMinConns, ReplicaMinIdleConns,
// ReplicaMaxConnLifetimeJitter, and the Primary pool fields but
// PrimaryHealthCheckPeriod) are left as they are.
func (c *Config) SetDefaults() {
	setDefault(&c.Consistency, DefaultConsistency)
	setDefault(&c.ProbeInterval, DefaultProbeInterval)
	setDefault(&c.SelectPolicy, DefaultSelectPolicy)
	setDefault(&c.LatencyWindow, DefaultLatencyWindow)
	setDefault(&c.Fallback, DefaultFallback)
	setDefault(&c.ReadOnlyTx, DefaultReadOnlyTx)
	setDefault(&c.WriteTimeout, DefaultWriteTimeout)
	setDefault(&c.Lease, DefaultLease)
	setDefault(&c.ReplicaMaxConns, DefaultReplicaMaxConns)
	setDefault(&c.ReplicaMaxConnLifetime, DefaultMaxConnLifetime)
	setDefault(&c.ReplicaMaxConnIdleTime, DefaultMaxConnIdleTime)
	setDefault(&c.ReplicaHealthCheckPeriod, DefaultHealthCheckPeriod)
	setDefault(&c.PrimaryHealthCheckPeriod, DefaultHealthCheckPeriod)
	setDefault(&c.CircuitFailures, DefaultCircuitFailures)
	setDefault(&c.CircuitMaxBackoff, defaultCircuitMaxBackoff(c.ProbeInterval))
	setDefault(&c.Topology, DefaultTopology)
	setDefault(&c.PatroniTimeout, DefaultPatroniTimeout)
	setDefault(&c.DiscoverMax, DefaultDiscoverMax)
	setDefault(&c.MaxLag, defaultMaxLag(c.ProbeInterval))
	for i := range c.Hosts {
		setDefault(&c.Hosts[i].Weight, DefaultWeight)
		setDefault(&c.Hosts[i].Name, c.Hosts[i].Addr)
	}
}

// defaultMaxLag is MaxLag's default under the probe interval probe:
// DefaultMaxLag, or lagIntervals probe intervals when that is longer.
func defaultMaxLag(probe time.Duration) LagBudget {
	return LagTime(max(DefaultMaxLag, lagIntervals*min(probe, math.MaxInt64/lagIntervals)))
}

// defaultCircuitMaxBackoff is CircuitMaxBackoff's default under the probe
// interval probe: DefaultCircuitMaxBackoff, or the probe interval when that
// is longer (an open circuit is not probed more often than a healthy host).
func defaultCircuitMaxBackoff(probe time.Duration) time.Duration {
	return max(DefaultCircuitMaxBackoff, probe)
}

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// withDefaults returns a copy of c (its Hosts slice copied too) with
// SetDefaults applied.
func (c *Config) withDefaults() *Config {
	d := *c
	d.Hosts = slices.Clone(c.Hosts)
	d.SetDefaults()
	return &d
}

// Clone returns a deep copy of c: its Hosts slice and each host's
// ConnConfig are copies (pgx's [pgx.ConnConfig.Copy]; TLS configurations
// are cloned).
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	n := *c
	n.ReadFunctions = slices.Clone(c.ReadFunctions)
	n.WriteFunctions = slices.Clone(c.WriteFunctions)
	n.PatroniEndpoints = slices.Clone(c.PatroniEndpoints)
	if c.Hosts != nil {
		n.Hosts = make([]Host, len(c.Hosts))
		for i, h := range c.Hosts {
			if h.ConnConfig != nil {
				h.ConnConfig = h.ConnConfig.Copy()
			}
			n.Hosts[i] = h
		}
	}
	return &n
}

// String returns [Config.Redacted]. It has a value receiver so that fmt
// uses it for a Config as well as for a *Config.
func (c Config) String() string { return c.Redacted() }

// GoString returns [Config.Redacted], so that %#v never shows a password
// either.
func (c Config) GoString() string { return c.Redacted() }

// Redacted returns the Config as a connection string without its
// passwords. A URL is [Format]'s string with the userinfo password and the
// password and sslpassword values masked as xxxxx where pgconn's own
// redaction finds them; a keyword/value string, or one built in code, is
// written afresh from the hosts' settings as Format writes a Config built
// in code, with password=xxxxx (and no sslpassword). A Patroni endpoint's
// password is masked in the URL it is part of. A host's password (four
// bytes or more) is masked wherever else it appears; when it is made of
// the mask's letters and cannot be, the whole string is xxxxx.
func (c Config) Redacted() string { return format(&c, true) }
