package workload

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted"
)

const (
	svcUsers    = 8
	svcMore     = 4    // reads after each read-back
	svcRecent   = 16   // a user's own rows its further reads pick from
	svcProducts = 1000 // rows of svc_products
	// svcPause is a user's pause between its write and its reads in the
	// pausing cases (a redirect, a page load).
	svcPause = 100 * time.Millisecond
	// svcCycle and svcPaused: under global, one replica's replay is paused
	// for svcPaused in every svcCycle.
	svcCycle  = 8 * time.Second
	svcPaused = 1500 * time.Millisecond
)

// svcDelays are how far behind the replicas replay: the first by 15 ms,
// the second by 40 ms (replicas in another zone, under load).
var svcDelays = []time.Duration{15 * time.Millisecond, 40 * time.Millisecond}

// svcCase is one row of the service workload.
type svcCase struct {
	key     string // in Facts: service/<key>/…
	name    string
	before  string // replicas' share of the reads before relation scope (issue 41)
	extra   string // DSN keys
	session bool   // a pgrouted.Session per user
	pause   time.Duration
	mixed   bool // writes to svc_orders, reads of svc_products
	global  bool // two instances, a replica paused, reads of others' rows
}

var svcCases = []svcCase{
	{key: "defaults", name: "write, read it back, 4 more reads of the same table; defaults", before: "0.0%"},
	{key: "pause", name: "the same, users pausing 100 ms between write and reads", before: "50.8%", pause: svcPause},
	{key: "wait", name: "the same, `pgrouted_replica_wait=50ms`", before: "100%", extra: "&pgrouted_replica_wait=50ms"},
	{key: "session", name: "a Session per user, no pause, no wait", before: "0.3%", session: true},
	{key: "session-wait", name: "a Session per user, `replica_wait=50ms`", before: "100%", session: true, extra: "&pgrouted_replica_wait=50ms"},
	{key: "session-pause", name: "a Session per user, users pausing 100 ms", before: "100%", session: true, pause: svcPause},
	{key: "mixed", name: "writes to `orders`, reads: the own order back + 4 reads of `products` (a table nobody writes); defaults", before: "0.0%", mixed: true},
	{key: "global-paused", name: "`pgrouted_consistency=global&pgrouted_replica_wait=100ms`, two instances of 4 users, one replica's replay paused 1.5 s in every 8 s", before: "60–65%",
		extra: "&pgrouted_consistency=global&pgrouted_replica_wait=100ms", global: true},
	{key: "global-paused-nowait", name: "the same, no replica wait", before: "–",
		extra: "&pgrouted_consistency=global", global: true},
}

// svcResult is one run of a case.
type svcResult struct {
	reads, stale, errs uint64
	replicaShare       float64
	readsPerSec        float64
	p50, p99           time.Duration
	primaryCPU         time.Duration // the primary's, during the run
	waits, timeouts    uint64        // replica waits, and those that timed out
	fallbacks          map[pgrouted.Reason]uint64
	pauses             int
}

var svcNextID atomic.Int64

// Service is the service workload (issue 41): a service process whose 8
// concurrent users each write a row and then read, opened as a new user
// would (sql.Open with the DSN's defaults unless the case says otherwise),
// the replicas replaying 15 and 40 ms behind; one row per case.
func Service(ctx context.Context, e *Env) ([]Table, error) {
	if err := e.Restore(ctx); err != nil {
		return nil, err
	}
	if err := e.Cluster.Primary().Exec(ctx, fmt.Sprintf(`
		DROP TABLE IF EXISTS svc_rows, svc_orders, svc_products;
		CREATE TABLE svc_rows (id bigint PRIMARY KEY, user_id int NOT NULL, v bigint NOT NULL);
		CREATE TABLE svc_orders (id bigint PRIMARY KEY, user_id int NOT NULL, v bigint NOT NULL);
		CREATE TABLE svc_products (id int PRIMARY KEY, name text NOT NULL);
		INSERT INTO svc_products SELECT g, 'product ' || g FROM generate_series(1, %d) g;
		ANALYZE svc_products`, svcProducts)); err != nil {
		return nil, err
	}
	if err := e.Cluster.WaitReplicated(ctx); err != nil {
		return nil, err
	}
	meter, err := newCPUMeter(e.Cluster)
	if err != nil {
		return nil, err
	}
	globalRun := svcGlobalDuration(e.Duration)
	t := Table{
		Title: "Service: reads move off a busy primary",
		Intro: fmt.Sprintf("A service process with %d concurrent users, each in a loop writing a row (an autocommit INSERT) and then reading: "+
			"the row back by its key, then %d more reads by key of the same table (rows the user wrote, among its last %d), "+
			"opened as a new user would: `sql.Open(\"pgrouted\", dsn)` on the cluster's DSN with the DSN's defaults unless the row says otherwise "+
			"(database/sql keeping one idle connection per user), a `pgrouted.Session` per user in the context where the row says so. "+
			"The replicas replay %s and %s behind (the fault point on each one's replication link). %v per row. "+
			"A *stale read* is a read that does not find a row it must see: the user's own rows; under `global`, also every row whose INSERT returned before the read began. "+
			"*Replica share*: the connectors' reads served by replicas (Stats.Statements). *Primary CPU per read*: the CPU time the primary's whole server used "+
			"during the row (postmaster and every child: the writes, the WAL sent, the position reads; not pgrouted's probe connections), over the reads served. "+
			"*Before*: the replica share measured before read-your-writes was scoped by relation and before a read missing its position tried another replica (issue 41).",
			svcUsers, svcMore, svcRecent, Dur(svcDelays[0]), Dur(svcDelays[1]), e.Duration),
		Header: []string{"case", "before", "replica share", "reads", "reads/s", "read p50", "read p99", "stale reads", "errors", "primary CPU per read", "waits (timeouts)", "reads on the primary, by reason"},
	}
	for _, c := range svcCases {
		if err := e.SetReplicationDelays(svcDelays...); err != nil {
			return nil, err
		}
		e.Logf("service: %s", c.key)
		r, err := runService(ctx, e, meter, c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.key, err)
		}
		cpu := "-"
		if r.reads > 0 {
			cpu = fmt.Sprintf("%.1f µs", float64(r.primaryCPU)/1e3/float64(r.reads))
		}
		waits := "-"
		if r.waits > 0 {
			waits = fmt.Sprintf("%d (%d)", r.waits, r.timeouts)
		}
		t.Add(c.name, c.before, Pct(r.replicaShare), r.reads, fmt.Sprintf("%.0f", r.readsPerSec), r.p50, r.p99, r.stale, r.errs, cpu, waits, fallbackText(r.fallbacks))
		key := "service/" + c.key
		e.Facts[key+"/share"] = r.replicaShare
		e.Facts[key+"/stale"] = float64(r.stale)
		e.Facts[key+"/errors"] = float64(r.errs)
	}
	if err := e.SetReplicationDelay(0); err != nil {
		return nil, err
	}
	t.Notes = append(t.Notes,
		"The mixed-tables row's users write `svc_orders` and read their order back, then 4 rows of `svc_products`, which nobody writes: "+
			"scoped by relation, a products read needs no position. "+
			fmt.Sprintf("The `global` rows run two instances of the service (two sql.DBs, each of %d users) for %v (whole cycles of %v: replay of the first replica, %s behind, "+
				"paused for %v in the middle of each); each user's 4 further reads read the newest row any user of either instance had written before the read began, "+
				"which only `global` promises to find. ", svcUsers/2, globalRun, svcCycle, Dur(svcDelays[0]), svcPaused)+
			"Without a replica wait, a `global` read needs a position the primary wrote after the read began, which no replica 15 ms or more behind holds "+
			"while the users write: such reads go to the primary (the last row, for information). "+
			"*Reads on the primary, by reason*: Stats.Fallbacks during the row, the most frequent first. *Waits (timeouts)*: reads that waited on a replica for their position (Stats.ReplicaWaits), and those whose wait ran out (ReplicaWaitTimeouts). "+
			"Before: the issue's measurements (its table; the global row from its item 4, which does not give its replica wait), on another build and load.")
	return []Table{t}, nil
}

// svcGlobalDuration is how long a global row runs: whole cycles of the
// paused replica, as many as fit in d (at least one).
func svcGlobalDuration(d time.Duration) time.Duration {
	n := max(1, int((d+svcCycle/2)/svcCycle))
	return time.Duration(n) * svcCycle
}

// openService opens pgrouted as a service would: sql.Open("pgrouted", dsn)
// (database/sql calls the driver's OpenConnector, then OpenDB: the same
// here, keeping the Connector for its Stats), then waits until a read of
// svc_products right after a write to svc_orders goes to a replica: the
// replicas and the catalog's relations are known (a service's start-up,
// not measured).
func openService(ctx context.Context, dsn string) (*sql.DB, *pgrouted.Connector, error) {
	dc, err := (&pgrouted.Driver{}).OpenConnector(dsn)
	if err != nil {
		return nil, nil, err
	}
	conn := dc.(*pgrouted.Connector)
	db := sql.OpenDB(conn)
	db.SetMaxIdleConns(svcUsers)
	deadline := time.Now().Add(45 * time.Second)
	for {
		_, err := db.ExecContext(ctx, "INSERT INTO svc_orders (id, user_id, v) VALUES ($1, -1, 0)", svcNextID.Add(1))
		if err == nil {
			var d pgrouted.Decision
			d, err = conn.Explain(ctx, "SELECT name FROM svc_products WHERE id = 1")
			if err == nil && !d.Primary {
				return db, conn, nil
			}
			if err == nil {
				err = fmt.Errorf("decision %+v", d)
			}
		}
		if time.Now().After(deadline) {
			db.Close()
			return nil, nil, fmt.Errorf("a read of another table after a write does not go to a replica after 45s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func runService(ctx context.Context, e *Env, meter *cpuMeter, c svcCase) (svcResult, error) {
	instances := 1
	if c.global {
		instances = 2
	}
	var (
		dbs   []*sql.DB
		conns []*pgrouted.Connector
	)
	defer func() {
		for _, db := range dbs {
			db.Close()
		}
	}()
	for range instances {
		db, conn, err := openService(ctx, e.Cluster.DSN()+c.extra)
		if err != nil {
			return svcResult{}, err
		}
		dbs, conns = append(dbs, db), append(conns, conn)
	}
	if err := meter.skipProbes(ctx); err != nil {
		return svcResult{}, err
	}
	table := "svc_rows"
	if c.mixed {
		table = "svc_orders"
	}
	var (
		write    = "INSERT INTO " + table + " (id, user_id, v) VALUES ($1, $2, $3)"
		readRow  = "SELECT user_id, v FROM " + table + " WHERE id = $1"
		product  = "SELECT name FROM svc_products WHERE id = $1"
		res      svcResult
		mu       sync.Mutex
		lat      []time.Duration
		stale    atomic.Uint64
		errs     atomic.Uint64
		firstErr atomic.Value
		acked    atomic.Int64 // the newest row whose INSERT returned
	)
	fail := func(err error) {
		errs.Add(1)
		firstErr.CompareAndSwap(nil, err)
	}
	// The run's first row, so that a global read has one to read.
	first := svcNextID.Add(1)
	if _, err := dbs[0].ExecContext(ctx, write, first, -1, 0); err != nil {
		return res, err
	}
	acked.Store(first)

	dur := e.Duration
	if c.global {
		dur = svcGlobalDuration(e.Duration)
	}
	var rep0, all0, waits0, timeouts0 uint64
	res.fallbacks = map[pgrouted.Reason]uint64{}
	for _, conn := range conns {
		r, a := readCounts(conn)
		st := conn.Stats()
		rep0, all0, waits0, timeouts0 = rep0+r, all0+a, waits0+st.ReplicaWaits, timeouts0+st.ReplicaWaitTimeouts
		for why, n := range st.Fallbacks {
			res.fallbacks[why] -= n
		}
	}
	cpu0, err := meter.sample()
	if err != nil {
		return res, err
	}
	runCtx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var wg sync.WaitGroup
	var pauseErr error
	if c.global {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res.pauses, pauseErr = pauseCycles(runCtx, e, dur)
		}()
	}
	start := time.Now()
	for u := range svcUsers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := dbs[u%instances]
			uctx := ctx
			if c.session {
				uctx = pgrouted.WithSession(ctx, pgrouted.NewSession())
			}
			rng := rand.New(rand.NewPCG(uint64(u), uint64(time.Now().UnixNano())))
			var (
				my     []time.Duration
				recent [svcRecent]int64
				n      int
			)
			// read reads row id of table q and reports whether it was
			// found with the value written (want < 0: any value).
			read := func(q string, id, want int64) {
				t0 := time.Now()
				var user, v int64
				var name string
				var err error
				if q == product {
					err = db.QueryRowContext(uctx, q, id).Scan(&name)
				} else {
					err = db.QueryRowContext(uctx, q, id).Scan(&user, &v)
				}
				d := time.Since(t0)
				switch {
				case errors.Is(err, sql.ErrNoRows):
					stale.Add(1)
				case err != nil:
					fail(err)
					return
				case want >= 0 && v != want:
					stale.Add(1)
				}
				my = append(my, d)
			}
			for runCtx.Err() == nil {
				id := svcNextID.Add(1)
				v := rng.Int64N(1 << 40)
				if _, err := db.ExecContext(uctx, write, id, u, v); err != nil {
					fail(err)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				for {
					cur := acked.Load()
					if id <= cur || acked.CompareAndSwap(cur, id) {
						break
					}
				}
				recent[n%svcRecent] = id
				n++
				if c.pause > 0 {
					time.Sleep(c.pause)
				}
				read(readRow, id, v)
				for range svcMore {
					switch {
					case c.mixed:
						read(product, int64(rng.IntN(svcProducts)+1), -1)
					case c.global:
						read(readRow, acked.Load(), -1) // returned before this read began
					default:
						read(readRow, recent[rng.IntN(min(n, svcRecent))], -1)
					}
				}
			}
			mu.Lock()
			lat = append(lat, my...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, err := meter.sample()
	if err != nil {
		return res, err
	}
	if pauseErr != nil {
		return res, pauseErr
	}
	var rep1, all1, waits1, timeouts1 uint64
	for _, conn := range conns {
		r, a := readCounts(conn)
		st := conn.Stats()
		rep1, all1, waits1, timeouts1 = rep1+r, all1+a, waits1+st.ReplicaWaits, timeouts1+st.ReplicaWaitTimeouts
		for why, n := range st.Fallbacks {
			res.fallbacks[why] += n
		}
	}
	res.waits, res.timeouts = waits1-waits0, timeouts1-timeouts0
	res.reads, res.stale, res.errs = uint64(len(lat)), stale.Load(), errs.Load()
	if all1 > all0 {
		res.replicaShare = float64(rep1-rep0) / float64(all1-all0)
	}
	res.readsPerSec = float64(res.reads) / elapsed.Seconds()
	sortDurations(lat)
	res.p50, res.p99 = percentile(lat, 50), percentile(lat, 99)
	res.primaryCPU = cpu1.since(cpu0).primary
	if v := firstErr.Load(); v != nil {
		e.Logf("service: %s: %d errors, first: %v", c.key, res.errs, v)
	}
	if c.global {
		e.Logf("service: %s: %d pauses of the first replica's replay", c.key, res.pauses)
	}
	return res, nil
}

// pauseCycles pauses the first replica's replay for svcPaused in the
// middle of each svcCycle of the run (of length dur, begun now), and
// returns how many pauses it made. A pause begun is always ended.
func pauseCycles(ctx context.Context, e *Env, dur time.Duration) (int, error) {
	r := e.Cluster.Replicas()[0]
	begin := time.Now()
	pauses := 0
	for k := time.Duration(0); (k+1)*svcCycle <= dur; k++ {
		at := begin.Add(k*svcCycle + (svcCycle-svcPaused)/2)
		select {
		case <-ctx.Done():
			return pauses, nil
		case <-time.After(time.Until(at)):
		}
		fctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := r.PauseReplay(fctx)
		if err == nil {
			pauses++
			time.Sleep(time.Until(at.Add(svcPaused)))
			err = r.ResumeReplay(fctx)
		}
		cancel()
		if err != nil {
			return pauses, err
		}
	}
	return pauses, nil
}

// fallbackText lists the reasons of the reads that fell back to the
// primary, the most frequent first, with their counts.
func fallbackText(m map[pgrouted.Reason]uint64) string {
	type kv struct {
		why pgrouted.Reason
		n   uint64
	}
	var l []kv
	for why, n := range m {
		if n > 0 {
			l = append(l, kv{why, n})
		}
	}
	if len(l) == 0 {
		return "-"
	}
	sort.Slice(l, func(i, j int) bool { return l[i].n > l[j].n || l[i].n == l[j].n && l[i].why < l[j].why })
	parts := make([]string, len(l))
	for i, x := range l {
		parts[i] = fmt.Sprintf("%s %d", x.why, x.n)
	}
	return strings.Join(parts, ", ")
}
