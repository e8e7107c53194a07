package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/circuit"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/topology"
)

// Config is a parsed pgrouted DSN plus the hooks a DSN cannot carry. Build
// one with [ParseConfig], change it, and pass it to [NewConnector].
// Printing a Config never shows a password.
type Config struct {
	// Config holds the hosts, each with its pgx configuration, and every
	// pgrouted_ routing setting (see package dsn for each field).
	dsn.Config

	// OnRoute, when set, is called after every statement with where it ran
	// and why. It runs on the statement's goroutine after the statement
	// returned its result: keep it fast. A panic in it is recovered and
	// logged; it never breaks the statement.
	OnRoute func(RouteEvent)

	// Logger, when set, receives one structured line for each topology
	// event (primary changed or lost, conflicting primaries, host up or
	// down, circuit opened or closed), and none per statement.
	Logger *slog.Logger

	// Select, when set, chooses the replica of a read among two or more
	// eligible ones, instead of the pgrouted_select policy (which is
	// Config.Config.Select): it returns the Name of one of candidates.
	// When it returns another name, the policy chooses. It runs on the
	// statement's goroutine for every such read: keep it fast.
	Select func(ctx context.Context, candidates []Candidate) string
}

// Candidate is an eligible replica offered to Config.Select.
type Candidate struct {
	Name     string
	Weight   int           // from pgrouted_weights
	Inflight int64         // reads running on it through this connector
	RTT      time.Duration // probe round trip EWMA; 0 when unknown
	ByteLag  uint64        // WAL bytes behind the primary's last probe
	// ByteLagKnown is false when ByteLag is unknown.
	ByteLagKnown bool
}

// ParseConfig parses a DSN: any connection string pgx accepts (URL or
// keyword/value, several hosts), plus the pgrouted_ keys listed in package
// dsn. Errors never contain the password.
func ParseConfig(connString string) (*Config, error) {
	c, err := dsn.Parse(connString)
	if err != nil {
		return nil, err
	}
	return &Config{Config: *c}, nil
}

// DefaultConnectTimeout bounds the opening of a data connection when the DSN
// has no connect_timeout.
var DefaultConnectTimeout = 5 * time.Second

// Connector owns everything behind a *sql.DB: the topology probers, one
// connection pool per host for replica reads, and the read-your-writes
// watermark. Build it with [NewConnector] and open it with sql.OpenDB;
// closing the *sql.DB closes it.
type Connector struct {
	cfg   Config
	hosts []dsn.Host
	top   *topology.Topology

	pools    []*pgxpool.Pool
	replicas []driver.Connector // per host: borrows a connection from its pool
	primary  []driver.Connector // per host: opens a primary session

	rr      atomic.Uint64 // round-robin position
	budget  lagmeter.Budget
	history *lagmeter.History // the primary's WAL positions (from topology)

	// writes is the position of the last writes through this connector.
	writes mark
	// known is, per host, a replay position read on a data connection
	// (the inline check), valid while the probe connection it was read
	// alongside is the same.
	known []atomic.Pointer[knownReplay]
	// inflight is, per host, the replica connections borrowed now.
	inflight []hostFlight
	// breakers are the hosts' circuit breakers, fed by probes and by
	// data-path connection failures.
	breakers []*circuit.Breaker
	// maxConns is the size of each replica pool.
	maxConns int64
	// booted is set once every host answered (pgrouted_strict_boot).
	booted atomic.Bool
	// counters are behind Stats.
	counters counters
	// descs are statement descriptions for the pipelined paths.
	descs descCache

	// loggedTimeline is the last timeline for which a possible loss of
	// writes was logged.
	loggedTimeline atomic.Uint32

	logDone chan struct{}
	closeMu sync.Mutex
	closed  bool
}

// NewConnector validates a copy of cfg and starts the topology probers.
// The pools open their connections on demand.
func NewConnector(cfg *Config) (*Connector, error) {
	if cfg == nil {
		return nil, fmt.Errorf("pgrouted: NewConnector: nil Config")
	}
	own := *cfg
	own.Config = *cfg.Config.Clone()
	if err := own.Config.Validate(); err != nil {
		return nil, err
	}
	c := &Connector{cfg: own, hosts: own.Hosts, known: make([]atomic.Pointer[knownReplay], len(own.Hosts)), inflight: make([]hostFlight, len(own.Hosts))}
	c.counters.statements = make([][len(opNames)]atomic.Uint64, len(own.Hosts))
	if d, ok := own.MaxLag.Time(); ok {
		c.budget.MaxTime = d
	} else if n, ok := own.MaxLag.Bytes(); ok {
		c.budget.MaxBytes = uint64(n)
	}
	th := make([]topology.Host, len(c.hosts))
	for i, h := range c.hosts {
		th[i] = topology.Host{Name: h.Name, Addr: h.Addr, Config: &h.ConnConfig.Config}
		pc, err := pgxpool.ParseConfig("")
		if err != nil {
			c.closePools()
			return nil, fmt.Errorf("pgrouted: pool for %s: %w", h.Name, err)
		}
		pc.ConnConfig = h.ConnConfig.Copy()
		if pc.ConnConfig.ConnectTimeout == 0 {
			// A host that stopped answering must not hold a read or a
			// write for ever: without connect_timeout, give up after
			// DefaultConnectTimeout.
			pc.ConnConfig.ConnectTimeout = DefaultConnectTimeout
		}
		if own.ReplicaMaxConns > 0 {
			pc.MaxConns = own.ReplicaMaxConns
		}
		c.maxConns = int64(pc.MaxConns)
		b, err := circuit.New(h.Name, circuit.Config{
			Failures:   own.CircuitFailures,
			Interval:   own.ProbeInterval,
			MaxBackoff: own.CircuitMaxBackoff,
			OnChange:   c.circuitChanged,
		})
		if err != nil {
			c.closePools()
			return nil, fmt.Errorf("pgrouted: circuit for %s: %w", h.Name, err)
		}
		c.breakers = append(c.breakers, b)
		// A primary session may be needed the moment the host answers
		// again: it dials whatever the circuit says.
		c.primary = append(c.primary, stdlib.GetConnector(*pc.ConnConfig.Copy()))
		// No replica connection, nor pgx's cancel request after a broken
		// read, dials a host whose circuit is open: it would only wait for
		// a host known not to answer.
		dial := pc.ConnConfig.DialFunc
		name := h.Name
		pc.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if !b.Allow() {
				return nil, fmt.Errorf("pgrouted: %s: circuit open", name)
			}
			return dial(ctx, network, addr)
		}
		pool, err := pgxpool.NewWithConfig(context.Background(), pc)
		if err != nil {
			c.closePools()
			return nil, fmt.Errorf("pgrouted: pool for %s: %w", h.Name, err)
		}
		c.pools = append(c.pools, pool)
		c.replicas = append(c.replicas, stdlib.GetPoolConnector(pool))
	}
	top, err := topology.New(th, topology.Options{
		Interval: own.ProbeInterval,
		Lease:    own.Lease,
		OnProbe:  func(i int, err error) { c.breakers[i].ReportProbe(err) },
		Backoff:  func(i, _ int) time.Duration { return c.breakers[i].ProbeBackoff() },
	})
	if err != nil {
		c.closePools()
		return nil, fmt.Errorf("pgrouted: %w", err)
	}
	c.top = top
	c.history = top.History()
	events, _ := top.Subscribe(64)
	c.logDone = make(chan struct{})
	go c.watch(events)
	return c, nil
}

// Connect implements driver.Connector. It does no I/O: a connection opens
// its primary session when a statement first needs the primary, and
// borrows replica connections per read. Under pgrouted_strict_boot it
// first waits for every host's first probe, and fails, naming every
// unreachable host, until all of them answered once.
func (c *Connector) Connect(ctx context.Context) (driver.Conn, error) {
	if c.cfg.StrictBoot && !c.booted.Load() {
		if err := c.strictBoot(ctx); err != nil {
			return nil, err
		}
	}
	return &conn{c: c}, nil
}

// strictBoot waits until every host was probed once, and fails while one
// of them did not answer.
func (c *Connector) strictBoot(ctx context.Context) error {
	deadline := time.Now().Add(c.cfg.ProbeInterval + 10*time.Second)
	for {
		s := c.top.Snapshot()
		var down []string
		probed := true
		for _, h := range s.Hosts {
			switch {
			case h.LastProbe.IsZero():
				probed = false
			case !h.Healthy:
				down = append(down, h.Name+" ("+h.LastError+")")
			}
		}
		if probed && len(down) == 0 {
			c.booted.Store(true)
			return nil
		}
		if probed || !time.Now().Before(deadline) {
			if len(down) == 0 {
				return fmt.Errorf("pgrouted: strict boot: hosts not probed yet")
			}
			return fmt.Errorf("pgrouted: strict boot: unreachable: %s", strings.Join(down, ", "))
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

// circuitChanged logs a breaker's change, and interrupts the reads stuck on
// a host whose circuit opened.
func (c *Connector) circuitChanged(ch circuit.Change) {
	if ch.To == circuit.Open {
		for i, h := range c.hosts {
			if h.Name == ch.Name {
				c.inflight[i].abort()
			}
		}
	}
	if c.cfg.Logger != nil {
		level := slog.LevelWarn
		if ch.To == circuit.Closed {
			level = slog.LevelInfo
		}
		c.cfg.Logger.Log(context.Background(), level, "pgrouted: circuit "+ch.To.String(), "host", ch.Name, "source", ch.Source.String(), "failures", ch.Failures)
	}
}

// Driver implements driver.Connector.
func (c *Connector) Driver() driver.Driver { return &Driver{} }

// Close stops the probers and closes every pool. database/sql calls it when
// the *sql.DB is closed; it is safe to call more than once.
func (c *Connector) Close() error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	s := c.top.Snapshot()
	c.top.Close()
	if c.logDone != nil {
		<-c.logDone
	}
	for i := range c.pools {
		if !s.Hosts[i].Healthy || !c.breakers[i].Allow() {
			c.dropIdle(i)
		}
	}
	c.closePools()
	return nil
}

// dropIdle closes the network connections under host i's idle pooled
// connections without a goodbye: the host does not answer, and a polite
// close would wait for it (pgxpool waits up to 15s per connection).
func (c *Connector) dropIdle(i int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, pc := range c.pools[i].AcquireAllIdle(ctx) {
		pc.Conn().PgConn().Conn().Close()
		pc.Release()
	}
}

func (c *Connector) closePools() {
	for _, p := range c.pools {
		p.Close()
	}
}

// watch follows the topology's events until Close and logs each one.
func (c *Connector) watch(events <-chan topology.Event) {
	defer close(c.logDone)
	for e := range events {
		if c.cfg.Logger == nil {
			continue
		}
		attrs := []any{"event", e.Kind.String()}
		if e.Kind != topology.EventHostUp && e.Kind != topology.EventHostDown {
			attrs = append(attrs, "epoch", e.Epoch)
		}
		if e.Host != "" {
			attrs = append(attrs, "host", e.Host)
		}
		if e.Previous != "" {
			attrs = append(attrs, "previous", e.Previous)
		}
		if e.Err != "" {
			attrs = append(attrs, "error", e.Err)
		}
		level := slog.LevelInfo
		if e.Kind == topology.EventConflict || e.Kind == topology.EventPrimaryLost || e.Kind == topology.EventHostDown {
			level = slog.LevelWarn
		}
		c.cfg.Logger.Log(context.Background(), level, "pgrouted: topology", attrs...)
	}
}

// Explain returns where query would run now, and why, without running it:
// no side effect, and the round-robin position does not move.
func (c *Connector) Explain(ctx context.Context, query string) (Decision, error) {
	p := c.plan(ctx, sqlclass.Classify(query), false, false)
	return p.decision(c), p.err
}

// knownReplay is a standby's replay position read on a data connection.
type knownReplay struct {
	conn uint64 // the host's probe connection incarnation when it was read
	lsn  lagmeter.LSN
}

// replay is what is known of standby i's replay position: the last probe's,
// or a later one read by an inline check since, while the host's probe
// connection has not changed (a restart can take a standby back to its
// minimum recovery point).
func (c *Connector) replay(i int, h *topology.HostState) lagmeter.LSN {
	if k := c.known[i].Load(); k != nil && k.conn == h.Conn && k.lsn > h.ReplayLSN {
		return k.lsn
	}
	return h.ReplayLSN
}

// noteReplay records a replay position read on a data connection.
func (c *Connector) noteReplay(i int, conn uint64, lsn lagmeter.LSN) {
	for {
		cur := c.known[i].Load()
		if cur != nil && cur.conn == conn && cur.lsn >= lsn {
			return
		}
		if c.known[i].CompareAndSwap(cur, &knownReplay{conn: conn, lsn: lsn}) {
			return
		}
	}
}

// wrote records a committed write on primary host at insert position lsn
// (0: unknown), for the connector and for the session of ctx, if any.
func (c *Connector) wrote(ctx context.Context, host int, lsn lagmeter.LSN) {
	if c.cfg.Consistency != dsn.ConsistencySession {
		return
	}
	var w lagmeter.Watermark
	if lsn != 0 {
		h := &c.top.Snapshot().Hosts[host]
		if h.SystemID != 0 && h.Timeline != 0 {
			w = lagmeter.Watermark{SystemID: h.SystemID, Timeline: h.Timeline, LSN: h.Layout.RecordEnd(lsn)}
		}
	}
	now := time.Now()
	c.writes.wrote(w, now)
	if s := sessionFrom(ctx); s != nil {
		s.m.wrote(w, now)
	}
}

// wroteAfter raises the watermarks after one statement (or COMMIT) read
// its position pipelined: to pos when it succeeded; not at all when the
// server refused it (nothing committed); to an unknown position when the
// connection failed under it (the answer was lost, not the commit).
func (c *Connector) wroteAfter(ctx context.Context, host int, pos lagmeter.LSN, err error) {
	switch {
	case err == nil:
		c.wrote(ctx, host, pos)
	case isPgError(err) || errors.Is(err, pgx.ErrTxCommitRollback) || errors.Is(err, driver.ErrBadConn):
	default:
		c.wrote(ctx, host, 0)
	}
}

// waitPrimary returns the primary's index and epoch, waiting until deadline
// for one with a valid lease.
func (c *Connector) waitPrimary(ctx context.Context, op string, deadline time.Time) (int, uint64, error) {
	var kicked time.Time
	for {
		s := c.top.Snapshot()
		now := time.Now()
		if s.LeaseValid(now) {
			return s.Primary, s.Epoch, nil
		}
		if !now.Before(deadline) {
			return -1, 0, &RouteError{Op: op, Reason: ReasonNoPrimary}
		}
		if now.Sub(kicked) >= 200*time.Millisecond {
			// A statement is waiting for a primary: probe every host now,
			// whatever backoff their circuits are in, so that one that
			// came back (or was promoted) is seen at once.
			kicked = now
			for i := range s.Hosts {
				c.top.ProbeNow(i)
			}
		}
		if err := sleepCtx(ctx, min(20*time.Millisecond, deadline.Sub(now))); err != nil {
			return -1, 0, err
		}
	}
}

// waitChange waits until the snapshot has news of host idx (a probe sent
// after now) or no longer names it the primary of epoch, or until deadline.
func (c *Connector) waitChange(ctx context.Context, idx int, epoch uint64, op string, deadline time.Time) error {
	first := c.top.Snapshot().Hosts[idx].LastProbe
	for {
		s := c.top.Snapshot()
		if s.Primary != idx || s.Epoch != epoch || s.Hosts[idx].LastProbe.After(first) {
			return nil
		}
		now := time.Now()
		if !now.Before(deadline) {
			return &RouteError{Op: op, Reason: ReasonNoPrimary}
		}
		if err := sleepCtx(ctx, min(10*time.Millisecond, deadline.Sub(now))); err != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (c *Connector) report(ev RouteEvent) {
	c.count(&ev)
	if c.cfg.OnRoute == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil && c.cfg.Logger != nil {
			c.cfg.Logger.Error("pgrouted: OnRoute panicked", "panic", fmt.Sprint(r))
		}
	}()
	c.cfg.OnRoute(ev)
}

var (
	_ driver.Connector = (*Connector)(nil)
)
