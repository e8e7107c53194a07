package pgrouted

import (
	"context"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pgrouted/pgrouted/circuit"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/topology"
)

// Connector owns everything behind a *sql.DB: the topology probers, the
// hosts (each with its connection pool for replica reads and its circuit
// breaker), the replica picker and the read-your-writes watermark. Build it
// with [NewConnector] and open it with sql.OpenDB; closing the *sql.DB
// closes it.
type Connector struct {
	// hostSet is the host set and its lifecycle (hostset.go), apart
	// from the statement path's state below.
	hostSet

	cfg    Config
	log    *slog.Logger // cfg.Logger, every line made printable (printableLogger); nil without one
	picker picker       // chooses among eligible replicas (pick.go)

	budget lagmeter.Budget
	gates  gateBudgets // the replicas' budget gates' thresholds (budgetgate.go)

	// rw is read-your-writes' shared state (intent.go).
	rw readYourWrites
	// counters are behind Stats (with each host's statement counters).
	counters counters
	// reads are the fallback reads running on the primary, against
	// pgrouted_primary_read_limit (primarylimit.go).
	reads primaryReads
	// funcs is the snapshot of the primary's functions that classification
	// judges calls by; refused, the statements a replica refused (catalog.go).
	funcs   *catalog
	refused refusedSet
	classes *classCache // classifications by text (classcache.go)
	// schema counts the schema changes seen through the connector
	// (stale.go); pooler is what was said of connection poolers
	// (txpooler.go).
	schema schemaCount
	pooler poolerNotes

	// prim counts and checks the primary sessions of every connection
	// (pgxpool's pool_ keys; primarysessions.go).
	prim primarySessions

	closeMu sync.Mutex
	closed  bool
}

// NewConnector validates a copy of cfg and starts the topology probers.
// The pools open their connections on demand.
func NewConnector(cfg *Config) (*Connector, error) {
	if cfg == nil {
		return nil, fmt.Errorf("pgrouted: NewConnector: nil Config")
	}
	own := *cfg.Clone()
	own.Config.SetDefaults() // a zero field is its default
	if err := own.Config.Validate(); err != nil {
		return nil, err
	}
	c, err := newConnector(own)
	if err != nil {
		return nil, err
	}
	th, err := c.openHosts()
	if err == nil {
		err = c.startTopology(th)
	}
	if err != nil {
		c.rw.index.Close()
		c.closePools()
		return nil, err
	}
	c.startWorkers()
	return c, nil
}

// newConnector is a Connector of the valid own, its hosts not open yet.
func newConnector(own Config) (*Connector, error) {
	read, err := parseFuncNames("pgrouted_read_functions", own.ReadFunctions)
	if err != nil {
		return nil, err
	}
	write, err := parseFuncNames("pgrouted_write_functions", own.WriteFunctions)
	if err != nil {
		return nil, err
	}
	c := &Connector{cfg: own, funcs: newCatalog(read, write), classes: newClassCache(), log: printableLogger(own.Logger)}
	c.prim.init(c)
	c.rw.index = consistency.NewReadIndex(c.fetchPosition, positionTimeout)
	c.rw.level = levelOf(own.Consistency)
	c.reads.limit = int64(own.PrimaryReadLimit)
	if d, ok := own.MaxLag.Time(); ok {
		c.budget.MaxTime = d
	} else if n, ok := own.MaxLag.Bytes(); ok {
		c.budget.MaxBytes = uint64(n)
	}
	c.gates = newGateBudgets(c.budget, own.ProbeInterval)
	// The Config.Select hook goes in front of the pgrouted_select policy.
	c.picker = newPicker(own.SelectPolicy, own.LatencyWindow, own.Select, c.log)
	return c, nil
}

// openHosts adds the DSN's hosts to the host table (their pools open
// their connections on demand), and returns them as the topology probes
// them.
func (c *Connector) openHosts() ([]topology.Host, error) {
	th := make([]topology.Host, len(c.cfg.Hosts))
	for i, h := range c.cfg.Hosts {
		hs, err := newHost(i, h, &c.cfg.Config, c.circuitChanged, c.wire)
		if err != nil {
			return nil, err
		}
		c.hosts.add(hs)
		th[i] = c.topologyHost(hs, &h.ConnConfig.Config)
	}
	return th, nil
}

// startTopology starts probing th, with the topology provider the Config
// asks for (and discovery, under pgrouted_discover).
func (c *Connector) startTopology(th []topology.Host) error {
	prov, err := newProvider(&c.cfg)
	if err != nil {
		return err
	}
	if p, ok := prov.(*topology.Patroni); ok && c.cfg.Provider == nil {
		c.patroni = p
	}
	opts := topology.Options{
		Provider: prov,
		Interval: c.cfg.ProbeInterval,
		Lease:    c.cfg.Lease,
		// Subscribed before the first probe: the boot's events are
		// logged too.
		EventBuffer: 64,
	}
	c.discovery(&opts) // hosts.go
	top, err := topology.New(th, opts)
	if err != nil {
		return fmt.Errorf("pgrouted: %w", err)
	}
	c.top = top
	c.history = top.History()
	c.started.Store(true)
	return nil
}

// startWorkers starts what runs beside the statements until Close: the
// log of topology events, the primary's terms, the function catalog's
// loads and the primary sessions' upkeep (pool_ keys).
func (c *Connector) startWorkers() {
	c.logDone = make(chan struct{})
	go c.watch(c.top.Events())
	c.stopTerms, c.termsDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.termsDone)
		c.followTerms(c.stopTerms)
	}()
	c.funcs.start(c.loadCatalog, c.pollCatalog, DefaultConnectTimeout+5*time.Second, c.cfg.ProbeInterval, c.cfg.ProbeInterval)
	c.prim.start()
}

// newProvider returns the topology provider cfg asks for: Patroni's under
// pgrouted_topology=patroni, else Config.Provider, else none (the probes
// alone).
func newProvider(cfg *Config) (topology.Provider, error) {
	switch {
	case cfg.Topology == dsn.TopologyPatroni && cfg.Provider != nil:
		return nil, fmt.Errorf("pgrouted: pgrouted_topology=patroni and Config.Provider are both set: choose one")
	case cfg.Topology == dsn.TopologyPatroni:
		p, err := topology.NewPatroni(cfg.PatroniEndpoints, cfg.PatroniTimeout, nil)
		if err != nil {
			return nil, fmt.Errorf("pgrouted: pgrouted_patroni_endpoints: %w", err)
		}
		return p, nil
	case cfg.Discover && cfg.Provider == nil:
		return nil, fmt.Errorf("pgrouted: pgrouted_discover=true needs a topology provider: pgrouted_topology=patroni, or Config.Provider")
	}
	return cfg.Provider, nil
}

// Connect implements driver.Connector. It does no I/O: a connection opens
// its primary session when a statement first needs the primary, and
// borrows replica connections per read. Under pgrouted_strict_boot it
// first waits for every host's first probe, and fails, naming every
// unreachable host, until all of them answered once.
func (c *Connector) Connect(ctx context.Context) (driver.Conn, error) {
	if c.cfg.StrictBoot && !c.booted.Load() {
		if err := c.strictBoot(ctx, c.cfg.ProbeInterval); err != nil {
			return nil, err
		}
	}
	return &conn{c: c}, nil
}

// circuitChanged logs a breaker's change, and interrupts the reads stuck on
// a host whose circuit opened.
func (c *Connector) circuitChanged(ch circuit.Change) {
	if ch.To == circuit.Open {
		for _, h := range c.hosts.all() {
			if h.Name == ch.Name {
				h.flight.abort()
			}
		}
	}
	if c.log != nil {
		level := slog.LevelWarn
		if ch.To == circuit.Closed {
			level = slog.LevelInfo
		}
		c.log.Log(context.Background(), level, "pgrouted: circuit "+ch.To.String(), "host", ch.Name, "source", ch.Source.String(), "failures", ch.Failures)
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
	c.prim.stop()
	c.funcs.close()
	c.rw.index.Close()
	c.closeHosts()
	return nil
}

var (
	_ driver.Connector = (*Connector)(nil)
)
