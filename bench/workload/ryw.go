package workload

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/plugin/dbresolver"
)

const (
	rywWorkers   = 16
	rywPlain     = 3    // plain reads after each read-back
	rywKeys      = 1000 // rows the plain reads pick from
	rywWaitLabel = "pgrouted session + replica_wait=10ms"
	// rywNoSessionLabel is the system whose workers share one
	// connector's read-your-writes, without Sessions.
	rywNoSessionLabel = "pgrouted, no Session"
)

// rywDelays are the replication delays the workload runs at.
var rywDelays = []time.Duration{0, time.Millisecond, 5 * time.Millisecond}

// rywClient is one system under the read-your-writes workload.
type rywClient interface {
	// write inserts row id.
	write(ctx context.Context, id int64) error
	// readBack reads row id and reports whether it was found.
	readBack(ctx context.Context, id int64) (bool, error)
	// read reads row key of the preloaded table.
	read(ctx context.Context, key int) error
	// replicaReads and allReads count the reads so far, for the share
	// served by replicas.
	replicaReads() (replica, all uint64)
	// ctx is the context of worker w (its Session, if any).
	ctx(parent context.Context, w int) context.Context
	close()
}

// rywSystem opens one system.
type rywSystem struct {
	name string
	open func(ctx context.Context, e *Env) (rywClient, error)
}

var rywSystems = []rywSystem{
	{"pgrouted session", func(ctx context.Context, e *Env) (rywClient, error) {
		return openRoutedClient(ctx, e, "", true)
	}},
	{rywWaitLabel, func(ctx context.Context, e *Env) (rywClient, error) {
		return openRoutedClient(ctx, e, "&pgrouted_replica_wait=10ms", true)
	}},
	// No Session: the workers share the connector's read-your-writes (a
	// read follows every write of the process), and their writes leave
	// their positions to the reads that need them (deferred positions).
	{rywNoSessionLabel, func(ctx context.Context, e *Env) (rywClient, error) {
		return openRoutedClient(ctx, e, "", false)
	}},
	{"pgrouted eventual", func(ctx context.Context, e *Env) (rywClient, error) {
		return openRoutedClient(ctx, e, "&pgrouted_consistency=eventual", false)
	}},
	{"pgrouted pin_after_write=1s", func(ctx context.Context, e *Env) (rywClient, error) {
		return openRoutedClient(ctx, e, "&pgrouted_pin_after_write=1s", true)
	}},
	{"GORM + dbresolver", openGorm},
}

// rywDSNKeys are the keys every pgrouted system of the workload has.
const rywDSNKeys = "&pgrouted_probe_interval=250ms&pgrouted_replica_max_conns=16"

type routedClient struct {
	db       *sql.DB
	conn     *pgrouted.Connector
	sessions []*pgrouted.Session
}

func openRoutedClient(ctx context.Context, e *Env, extra string, sessions bool) (rywClient, error) {
	db, conn, err := e.OpenRouted(ctx, rywDSNKeys+extra)
	if err != nil {
		return nil, err
	}
	db.SetMaxIdleConns(rywWorkers)
	c := &routedClient{db: db, conn: conn}
	if sessions {
		for range rywWorkers {
			c.sessions = append(c.sessions, pgrouted.NewSession())
		}
	}
	return c, nil
}

func (c *routedClient) ctx(parent context.Context, w int) context.Context {
	if c.sessions == nil {
		return parent
	}
	return pgrouted.WithSession(parent, c.sessions[w])
}

func (c *routedClient) write(ctx context.Context, id int64) error {
	_, err := c.db.ExecContext(ctx, "INSERT INTO ryw (id, v) VALUES ($1, 1)", id)
	return err
}

func (c *routedClient) readBack(ctx context.Context, id int64) (bool, error) {
	var v int
	err := c.db.QueryRowContext(ctx, "SELECT v FROM ryw WHERE id = $1", id).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (c *routedClient) read(ctx context.Context, key int) error {
	var v string
	return c.db.QueryRowContext(ctx, "SELECT v FROM ryw_kv WHERE id = $1", key).Scan(&v)
}

func (c *routedClient) replicaReads() (replica, all uint64) {
	st := c.conn.Stats()
	primary := c.conn.Topology().Primary
	for ep, ops := range st.Statements {
		all += ops[pgrouted.OpRead]
		if ep != primary {
			replica += ops[pgrouted.OpRead]
		}
	}
	return replica, all
}

func (c *routedClient) close() { c.db.Close() }

// gormClient is GORM with the dbresolver plugin: sources = the primary,
// replicas = the two replicas (random policy, the plugin's default). It
// sends every read outside a transaction to a replica, so its replica share
// is 100% by construction; what it risks is stale reads.
type gormClient struct {
	db    *gorm.DB
	reads atomic.Uint64
}

type rywRow struct {
	ID int64
	V  int
}

func (rywRow) TableName() string { return "ryw" }

type kvRow struct {
	ID int
	V  string
}

func (kvRow) TableName() string { return "ryw_kv" }

func openGorm(_ context.Context, e *Env) (rywClient, error) {
	db, err := gorm.Open(postgres.Open(e.Cluster.Primary().DSN()), &gorm.Config{Logger: logger.Discard, SkipDefaultTransaction: true})
	if err != nil {
		return nil, err
	}
	var replicas []gorm.Dialector
	for _, r := range e.Cluster.Replicas() {
		replicas = append(replicas, postgres.Open(r.DSN()))
	}
	if err := db.Use(dbresolver.Register(dbresolver.Config{Replicas: replicas, Policy: dbresolver.RandomPolicy{}}).
		SetMaxIdleConns(rywWorkers)); err != nil {
		return nil, err
	}
	return &gormClient{db: db}, nil
}

func (c *gormClient) ctx(parent context.Context, _ int) context.Context { return parent }

func (c *gormClient) write(ctx context.Context, id int64) error {
	return c.db.WithContext(ctx).Create(&rywRow{ID: id, V: 1}).Error
}

func (c *gormClient) readBack(ctx context.Context, id int64) (bool, error) {
	c.reads.Add(1)
	var rows []rywRow
	err := c.db.WithContext(ctx).Where("id = ?", id).Find(&rows).Error
	return len(rows) == 1, err
}

func (c *gormClient) read(ctx context.Context, key int) error {
	c.reads.Add(1)
	var rows []kvRow
	err := c.db.WithContext(ctx).Where("id = ?", key).Find(&rows).Error
	if err == nil && len(rows) != 1 {
		err = fmt.Errorf("row %d of ryw_kv not found", key)
	}
	return err
}

func (c *gormClient) replicaReads() (replica, all uint64) {
	n := c.reads.Load()
	return n, n
}

func (c *gormClient) close() {
	if sqlDB, err := c.db.DB(); err == nil {
		sqlDB.Close()
	}
}

// rywResult is one run of the workload.
type rywResult struct {
	reads, stale, errs  uint64
	replicaShare        float64
	stmtsPerSec         float64
	p50, p99, backP99   time.Duration
	waits, waitTimeouts uint64
	waitTime            time.Duration
}

var rywNextID atomic.Int64

// ReadYourWrites is the read-your-writes workload: 16 workers, each in a
// loop inserting a row, reading it back at once, then reading rywPlain
// rows of a preloaded table, for e.Duration per system and replication
// delay.
func ReadYourWrites(ctx context.Context, e *Env) ([]Table, error) {
	if err := e.Restore(ctx); err != nil {
		return nil, err
	}
	p := e.Cluster.Primary()
	if err := p.Exec(ctx, fmt.Sprintf(`
		DROP TABLE IF EXISTS ryw, ryw_kv;
		CREATE TABLE ryw (id bigint PRIMARY KEY, v int NOT NULL);
		CREATE TABLE ryw_kv (id int PRIMARY KEY, v text NOT NULL);
		INSERT INTO ryw_kv SELECT g, md5(g::text) FROM generate_series(1, %d) g;
		ANALYZE ryw_kv`, rywKeys)); err != nil {
		return nil, err
	}
	if err := e.Cluster.WaitReplicated(ctx); err != nil {
		return nil, err
	}
	rtt, err := roundTrip(ctx, e)
	if err != nil {
		return nil, err
	}
	e.Facts["rtt_ms"] = float64(rtt) / 1e6
	t := Table{
		Title: "Read-your-writes workload",
		Intro: fmt.Sprintf("%d workers, each in a loop: INSERT a row, read it back at once, then %d reads by primary key of a preloaded table; %v per run, "+
			"replication delayed on both replicas' links by the delay shown (testcluster's fault point on the replication connection). "+
			"A *stale read* is a read-back that does not find the row just written. Latencies are per read (read-backs and plain reads); "+
			"throughput counts every statement. The pgrouted rows use one pgrouted.Session per worker (per-user read-your-writes) and the DSN keys `%s`, "+
			"except *%s*: its workers share the connector's read-your-writes (a read follows every write the process made before it, whoever made it), "+
			"and its writes leave their WAL positions to be read by the first read that needs one (deferred positions), as in a service that does not use Sessions. "+
			"Median round trip of `SELECT 1` to a replica before the runs: %s.",
			rywWorkers, rywPlain, e.Duration, rywDSNKeys[1:], rywNoSessionLabel, Dur(rtt)),
		Header: []string{"system", "delay", "reads", "replica share", "stale reads", "errors", "stmts/s", "read p50", "read p99", "read-back p99", "waits (timeouts), mean wait"},
	}
	for _, d := range rywDelays {
		for _, sys := range rywSystems {
			if err := e.SetReplicationDelay(d); err != nil {
				return nil, err
			}
			e.Logf("ryw: %s at %v", sys.name, d)
			r, err := runRYW(ctx, e, sys)
			if err != nil {
				return nil, fmt.Errorf("%s at %v: %w", sys.name, d, err)
			}
			waits := "-"
			if r.waits > 0 || sys.name == rywWaitLabel {
				waits = fmt.Sprintf("%d (%d)", r.waits, r.waitTimeouts)
				if r.waits > 0 {
					waits += ", mean " + Dur(r.waitTime/time.Duration(r.waits))
				}
			}
			t.Add(sys.name, Dur(d), r.reads, Pct(r.replicaShare), r.stale, r.errs, fmt.Sprintf("%.0f", r.stmtsPerSec), r.p50, r.p99, r.backP99, waits)
			key := fmt.Sprintf("ryw/%s/%v", sys.name, d)
			e.Facts[key+"/share"] = r.replicaShare
			e.Facts[key+"/stale"] = float64(r.stale)
			e.Facts[key+"/p99_ms"] = float64(r.p99) / 1e6
		}
	}
	if err := e.SetReplicationDelay(0); err != nil {
		return nil, err
	}
	t.Notes = append(t.Notes,
		"GORM + dbresolver sends every read outside a transaction to a replica: its replica share is 100% by construction, and its stale reads are what that costs. "+
			"pgrouted eventual makes no read-your-writes promise either. pgrouted session never serves a read-back from a replica that lacks the write: "+
			"it checks the replica's replay position first (pipelined with the read), and without a wait goes to the primary when the replica is behind; "+
			"with `pgrouted_replica_wait` it waits on the replica up to the wait, in the same pipeline (PostgreSQL 15: a polling query, see replicawait.go). "+
			"A wait's time runs from sending it to its answer (Stats.ReplicaWaitTime), one round trip included.")
	return []Table{t}, nil
}

func runRYW(ctx context.Context, e *Env, sys rywSystem) (rywResult, error) {
	c, err := sys.open(ctx, e)
	if err != nil {
		return rywResult{}, err
	}
	defer c.close()
	var (
		res       rywResult
		mu        sync.Mutex
		lat, back []time.Duration
		stmts     atomic.Uint64
		stale     atomic.Uint64
		errs      atomic.Uint64
		firstErr  atomic.Value
	)
	var st0 pgrouted.Stats
	rc, isRouted := c.(*routedClient)
	if isRouted {
		st0 = rc.conn.Stats()
	}
	rep0, all0 := c.replicaReads()
	runCtx, cancel := context.WithTimeout(ctx, e.Duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range rywWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx := c.ctx(ctx, w)
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			var myLat, myBack []time.Duration
			fail := func(err error) {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
			for runCtx.Err() == nil {
				id := rywNextID.Add(1)
				if err := c.write(wctx, id); err != nil {
					fail(err)
					continue
				}
				stmts.Add(1)
				t0 := time.Now()
				found, err := c.readBack(wctx, id)
				d := time.Since(t0)
				if err != nil {
					fail(err)
					continue
				}
				stmts.Add(1)
				myLat, myBack = append(myLat, d), append(myBack, d)
				if !found {
					stale.Add(1)
				}
				for range rywPlain {
					t0 := time.Now()
					if err := c.read(wctx, rng.IntN(rywKeys)+1); err != nil {
						fail(err)
						continue
					}
					myLat = append(myLat, time.Since(t0))
					stmts.Add(1)
				}
			}
			mu.Lock()
			lat, back = append(lat, myLat...), append(back, myBack...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rep1, all1 := c.replicaReads()
	res.reads = uint64(len(lat))
	if all1 > all0 {
		res.replicaShare = float64(rep1-rep0) / float64(all1-all0)
	}
	res.stale, res.errs = stale.Load(), errs.Load()
	res.stmtsPerSec = float64(stmts.Load()) / elapsed.Seconds()
	sortDurations(lat)
	sortDurations(back)
	res.p50, res.p99, res.backP99 = percentile(lat, 50), percentile(lat, 99), percentile(back, 99)
	if isRouted {
		st1 := rc.conn.Stats()
		res.waits, res.waitTimeouts = st1.ReplicaWaits-st0.ReplicaWaits, st1.ReplicaWaitTimeouts-st0.ReplicaWaitTimeouts
		res.waitTime = st1.ReplicaWaitTime - st0.ReplicaWaitTime
	}
	if v := firstErr.Load(); v != nil {
		e.Logf("ryw: %s: %d errors, first: %v", sys.name, res.errs, v)
	}
	return res, nil
}
