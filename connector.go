package pgrouted

import (
	"context"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
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
	// down), and none per statement.
	Logger *slog.Logger
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
		if own.ReplicaMaxConns > 0 {
			pc.MaxConns = own.ReplicaMaxConns
		}
		pool, err := pgxpool.NewWithConfig(context.Background(), pc)
		if err != nil {
			c.closePools()
			return nil, fmt.Errorf("pgrouted: pool for %s: %w", h.Name, err)
		}
		c.pools = append(c.pools, pool)
		c.replicas = append(c.replicas, stdlib.GetPoolConnector(pool))
		c.primary = append(c.primary, stdlib.GetConnector(*h.ConnConfig.Copy()))
	}
	top, err := topology.New(th, topology.Options{Interval: own.ProbeInterval, Lease: own.Lease})
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
// borrows replica connections per read.
func (c *Connector) Connect(context.Context) (driver.Conn, error) {
	return &conn{c: c}, nil
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
	c.top.Close()
	if c.logDone != nil {
		<-c.logDone
	}
	c.closePools()
	return nil
}

func (c *Connector) closePools() {
	for _, p := range c.pools {
		p.Close()
	}
}

// watch follows the topology's events until Close: it interrupts the reads
// stuck on a host whose probe failed, and logs each event.
func (c *Connector) watch(events <-chan topology.Event) {
	defer close(c.logDone)
	for e := range events {
		if e.Kind == topology.EventHostDown {
			if i := c.top.Snapshot().Index(e.Host); i >= 0 {
				c.inflight[i].abort()
			}
		}
		if c.cfg.Logger == nil {
			continue
		}
		attrs := []any{"event", e.Kind.String(), "epoch", e.Epoch}
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

// waitPrimary returns the primary's index and epoch, waiting until deadline
// for one with a valid lease.
func (c *Connector) waitPrimary(ctx context.Context, op string, deadline time.Time) (int, uint64, error) {
	for {
		s := c.top.Snapshot()
		now := time.Now()
		if s.LeaseValid(now) {
			return s.Primary, s.Epoch, nil
		}
		if !now.Before(deadline) {
			return -1, 0, &RouteError{Op: op, Reason: ReasonNoPrimary}
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
