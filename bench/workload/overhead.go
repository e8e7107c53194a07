package workload

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgrouted/pgrouted"
)

const (
	// overheadRounds is how many times each stack runs the statement.
	overheadRounds = 4000
	// overheadSets is how many sets of connections they run on, one after
	// the other, overheadRounds/overheadSets rounds each (see interleave).
	overheadSets = 8
	// overheadWarmUp is the rounds each set runs first, not timed.
	overheadWarmUp = 100
	// overheadSettle is how long a set's connections are left alone
	// between their opening and their rounds: a new pgrouted Connector
	// connects its probes and reads the catalog meanwhile, which is its
	// start, not what a statement costs.
	overheadSettle = time.Second
)

// Overhead measures the latency of a one-row SELECT by primary key through
// pgx's driver straight to the primary, straight to a replica and
// alternating over the two replicas, pgrouted forced to the primary,
// pgrouted on the primary and that one replica, and pgrouted on the whole
// cluster (reads round-robin over the two replicas), then through pgxpool
// and pgrouted.Pool, and of a one-row autocommit INSERT (overheadInsert),
// one statement at a time and interleaved, so that a change of load on the
// machine falls on every stack alike; medians resist the load's spikes
// better than the Go benchmarks' means. It measures with the servers and
// this process on CPUs of their own (pinCPUs), which the targets use, then
// again left to the scheduler, for information.
func Overhead(ctx context.Context, e *Env) ([]Table, error) {
	if err := e.Restore(ctx); err != nil {
		return nil, err
	}
	if err := e.Cluster.Primary().Exec(ctx, `
		CREATE TABLE IF NOT EXISTS ovh_kv (id int PRIMARY KEY, v text);
		INSERT INTO ovh_kv SELECT g, md5(g::text) FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING`); err != nil {
		return nil, err
	}
	if err := e.Cluster.WaitReplicated(ctx); err != nil {
		return nil, err
	}
	d, err := e.ovhDSNs()
	if err != nil {
		return nil, err
	}
	// Pinned first (pin.go): the targets' measure. Then the same left to
	// the scheduler, for information.
	unpin, client, servers, pinned, err := pinCPUs(e.Cluster)
	if err != nil {
		return nil, err
	}
	placement := fmt.Sprintf("The servers ran on CPUs %v and this process on CPU %d (see below).", servers, client)
	if !pinned {
		placement = "This machine has one CPU: the client and the servers shared it."
	}
	reads, rerr := overheadReads(ctx, e, d, "overhead", "Overhead, interleaved", placement)
	var ins Table
	if rerr == nil {
		ins, rerr = overheadInsert(ctx, e, d, "overhead-insert", "Overhead, interleaved: INSERT")
	}
	if err := errors.Join(rerr, unpin()); err != nil {
		return nil, err
	}
	if !pinned {
		return []Table{reads, ins}, nil
	}
	placement = "Left to the scheduler: the client and the servers on any CPU. For information: not the targets' measure (see *Overhead, interleaved*)."
	ureads, err := overheadReads(ctx, e, d, "unpinned/overhead", "Overhead, interleaved, unpinned", placement)
	if err != nil {
		return nil, err
	}
	uins, err := overheadInsert(ctx, e, d, "unpinned/overhead-insert", "Overhead, interleaved, unpinned: INSERT")
	if err != nil {
		return nil, err
	}
	return []Table{reads, ins, ureads, uins}, nil
}

// overheadReads is Overhead's SELECT, its facts under prefix, its table
// titled title and saying where the processes ran (placement).
func overheadReads(ctx context.Context, e *Env, d ovhDSNs, prefix, title, placement string) (Table, error) {
	const (
		pgxName     = "pgx"
		replicaName = "pgx straight to a replica"
		altName     = "pgx alternating over 2 replicas"
		poolName    = "pgxpool"
		poolRName   = "pgxpool straight to a replica"
	)
	read := func(ctx context.Context, db costDB, i int) error {
		var v string
		return db.queryRow(ctx, "SELECT v FROM ovh_kv WHERE id = $1", []any{i%1000 + 1}, &v)
	}
	forced := pgrouted.WithRoute(ctx, pgrouted.Primary)
	// The driver's stacks take turns, then the pgx-native ones: each
	// statement's backend idles while the others of its group run, and
	// fewer at a time keep that as it is for pgx alone. (The pgx-native
	// stacks' pools, and the Pool's probes, are not there while the
	// driver's run.)
	groups := []ovhGroup{{
		stacks: []ovhStack{
			{name: pgxName},
			{name: replicaName},
			{name: replicaName + ", a second connection", base: replicaName},
			{name: altName},
			{name: "pgrouted, forced to the primary", ctx: forced, base: pgxName},
			{name: "pgrouted, 1 replica", base: replicaName},
			{name: "pgrouted, 2 replicas (round-robin)", base: altName},
		},
		open: func(o *ovhOpener) ([]costDB, error) {
			// Every pgx stack has connections of its own: one that
			// another stack's statements also ran on would be warmer
			// than pgrouted's.
			pgx, pgxR := o.sql(d.primary), o.sql(d.replica)
			alt := costAlt{dbs: []costDB{o.sql(d.replica), o.sql(d.replica2)}, i: new(int)}
			routed, routed1 := o.routed(d.all), o.routed(d.one)
			return []costDB{pgx, pgxR, o.sql(d.replica), alt, routed, routed1, routed}, o.err
		},
	}, {
		stacks: []ovhStack{
			{name: poolName},
			{name: poolRName},
			{name: "pgrouted.Pool, forced to the primary", ctx: forced, base: poolName},
			{name: "pgrouted.Pool, 1 replica", base: poolRName},
		},
		open: func(o *ovhOpener) ([]costDB, error) {
			p, r, routed := o.pool(d.primary), o.pool(d.replica), o.routedPool(d.one)
			return []costDB{p, r, routed, routed}, o.err
		},
	}}
	res, err := interleave(ctx, e, groups, read)
	if err != nil {
		return Table{}, err
	}
	t := Table{
		Title: title,
		Intro: fmt.Sprintf("A one-row `SELECT` by primary key, %d times through each stack, one statement at a time, the stacks taking turns "+
			"in a random order drawn afresh for each round (no stack always follows the same one: a statement right after one on the same server finds it warmer), each statement timed on its own: pgx's database/sql driver straight to the primary, straight to a replica "+
			"(twice: two connections, the same code), "+
			"and alternating over the two replicas statement by statement; pgrouted with the statement routed to the primary (the same server as pgx); "+
			"pgrouted opened on the primary and the replica pgx straight to a replica reads from (*1 replica*: its reads go to that server); and pgrouted on the "+
			"whole cluster, its reads round-robin over both replicas. Then, taking turns among themselves, pgx's pool (pgxpool) straight to the primary "+
			"and to that replica, and pgrouted.Pool opened on the primary and that replica, forced to the primary and not. "+
			"Every stack connects to the servers' own addresses, not through testcluster's fault points "+
			"(which copy every byte in this process, at more CPU per statement than the server spends on it). %s %s", overheadRounds, setsText, placement),
		Header: []string{"stack", "p50", "p90", "p99", "p50 vs pgx", "p50 vs pgx straight to a replica", "vs the same servers through pgx: the sets' p50 ratios"},
	}
	for j, s := range res.stacks {
		p50 := percentile(res.all[j], 50)
		vsPgx, vsReplica := res.vsPooled(j, pgxName), ""
		if j > 0 {
			vsReplica = res.vsPooled(j, replicaName)
		}
		t.Add(s.name, p50, percentile(res.all[j], 90), percentile(res.all[j], 99), vsPgx, vsReplica, res.vsBase(e, prefix, j))
		e.Facts[prefix+"/"+s.name+"/p50_us"] = float64(p50) / 1e3
	}
	return t, nil
}

// setsText says how interleave's sets of connections are used.
var setsText = fmt.Sprintf("The stacks run on %d sets of connections in turn, each opened afresh for %d rounds (after %v of rest and %d rounds of warm-up), "+
	"because a connection keeps the placement its server process got from the scheduler (on the client's CPU or the other one): "+
	"two connections of pgx's driver to the same replica, taking turns, differed by up to 17%% in their p50 over 1 000 rounds. "+
	"p50, p90 and p99 are of all the sets' statements; the last column is the median, over the sets, of the stack's p50 over its baseline's p50 "+
	"in the same set, with its interquartile range: what the targets use.",
	overheadSets, overheadRounds/overheadSets, overheadSettle, overheadWarmUp)

// ovhDSNs are the connection strings of the overhead workload's stacks:
// every one reaches the servers directly, not through their fault points
// (Env.DirectDSNOf).
type ovhDSNs struct {
	primary, replica, replica2 string
	all, one                   string // pgrouted's: the whole cluster; the primary and replica
}

func (e *Env) ovhDSNs() (ovhDSNs, error) {
	rs := e.Cluster.Replicas()
	d := ovhDSNs{primary: e.Cluster.Primary().DirectDSN(), replica: rs[0].DirectDSN(), replica2: rs[1].DirectDSN()}
	var errAll, errOne error
	d.all, errAll = e.DirectDSN()
	d.one, errOne = e.DirectDSNOf(e.Cluster.Primary(), rs[0])
	return d, errors.Join(errAll, errOne)
}

// ovhStack is one way to the servers in the overhead workload.
type ovhStack struct {
	name string
	ctx  context.Context // nil: the workload's
	// base is the stack a like-for-like comparison is with (Overhead).
	base string
}

// ovhGroup is stacks that take turns, and how to open a set of their
// connections: open returns each stack's costDB, in order, through o,
// which closes them all once the set has run.
type ovhGroup struct {
	stacks []ovhStack
	open   func(o *ovhOpener) ([]costDB, error)
}

// ovhOpener opens a set's stacks and remembers them for close. Its first
// error is err; the stacks it opens after one are nil.
type ovhOpener struct {
	ctx    context.Context
	e      *Env
	err    error
	closes []func()
}

const ovhProbe = "&pgrouted_probe_interval=250ms"

// sqlDB opens a set's database/sql stack with open.
func (o *ovhOpener) sqlDB(open func() (*sql.DB, error)) costDB {
	if o.err != nil {
		return nil
	}
	db, err := open()
	if o.err = err; err != nil {
		return nil
	}
	o.closes = append(o.closes, func() { db.Close() })
	return costSQL{db}
}

// sql opens pgx's database/sql driver on dsn.
func (o *ovhOpener) sql(dsn string) costDB {
	return o.sqlDB(func() (*sql.DB, error) { return sql.Open("pgx", dsn) })
}

// routed opens pgrouted on dsn, once its reads go to a replica.
func (o *ovhOpener) routed(dsn string) costDB {
	return o.sqlDB(func() (*sql.DB, error) {
		db, _, err := o.e.openRouted(o.ctx, dsn, ovhProbe)
		return db, err
	})
}

func (o *ovhOpener) pool(dsn string) costDB {
	if o.err != nil {
		return nil
	}
	p, err := pgxpool.New(o.ctx, dsn)
	if o.err = err; err != nil {
		return nil
	}
	o.closes = append(o.closes, p.Close)
	return costPool{p}
}

// routedPool opens a pgrouted.Pool on dsn, once its reads go to a replica.
func (o *ovhOpener) routedPool(dsn string) costDB {
	if o.err != nil {
		return nil
	}
	p, err := pgrouted.NewPool(o.ctx, dsn+ovhProbe)
	if o.err = err; err != nil {
		return nil
	}
	o.closes = append(o.closes, p.Close)
	o.err = waitReplicaReads(o.ctx, p.Connector())
	return costPool{p}
}

func (o *ovhOpener) close() {
	for _, c := range o.closes {
		c()
	}
	o.closes = nil
}

// ovhResult is what interleave measured: each stack's latencies, all
// together (all) and each set's p50 (sets).
type ovhResult struct {
	stacks []ovhStack // every group's, in order
	all    [][]time.Duration
	sets   [][]time.Duration
}

// index is the stack named name, or -1.
func (r *ovhResult) index(name string) int {
	for j, s := range r.stacks {
		if s.name == name {
			return j
		}
	}
	return -1
}

// vsPooled compares stack j's p50 over all its statements with stack
// base's.
func (r *ovhResult) vsPooled(j int, base string) string {
	b := r.index(base)
	if b < 0 {
		return ""
	}
	return fmt.Sprintf("%+.1f%%", 100*(float64(percentile(r.all[j], 50))/float64(percentile(r.all[b], 50))-1))
}

// vsBase compares stack j with its base, set by set (pairedRatio), and
// records the ratio and its quartiles as facts under prefix for the
// targets.
func (r *ovhResult) vsBase(e *Env, prefix string, j int) string {
	s := r.stacks[j]
	b := r.index(s.base)
	if b < 0 {
		return ""
	}
	med, lo, hi := pairedRatio(r.sets[j], r.sets[b])
	key := prefix + "/" + s.name + "/ratio"
	e.Facts[key], e.Facts[key+"_lo"], e.Facts[key+"_hi"] = med, lo, hi
	e.Facts[prefix+"/"+s.name+"/base_p50_us"] = float64(percentile(r.all[b], 50)) / 1e3
	return fmt.Sprintf("%+.1f%% (IQR %+.1f%% – %+.1f%%; %s)", 100*(med-1), 100*(lo-1), 100*(hi-1), s.base)
}

// interleave runs op through each stack overheadRounds times, one
// statement at a time, on overheadSets sets of connections in turn: for
// each set, each group's connections are opened, its stacks take turns
// (in a random order drawn afresh for each round: no stack always follows
// the same one) for overheadRounds/overheadSets rounds after
// overheadWarmUp untimed ones, and its connections are closed before the
// next group's open.
func interleave(ctx context.Context, e *Env, groups []ovhGroup, op func(ctx context.Context, db costDB, i int) error) (*ovhResult, error) {
	res := &ovhResult{}
	for _, g := range groups {
		res.stacks = append(res.stacks, g.stacks...)
	}
	res.all = make([][]time.Duration, len(res.stacks))
	res.sets = make([][]time.Duration, len(res.stacks))
	rounds := overheadRounds / overheadSets
	// A fixed seed: the same orders in every run.
	order := rand.New(rand.NewPCG(1, 2))
	for range overheadSets {
		first := 0
		for _, g := range groups {
			o := &ovhOpener{ctx: ctx, e: e}
			dbs, err := g.open(o)
			if err != nil {
				o.close()
				return nil, err
			}
			time.Sleep(overheadSettle)
			n := len(g.stacks)
			set := make([][]time.Duration, n)
			for i := range overheadWarmUp + rounds {
				for _, j := range order.Perm(n) {
					s := g.stacks[j]
					sctx := s.ctx
					if sctx == nil {
						sctx = ctx
					}
					t0 := time.Now()
					if err := op(sctx, dbs[j], i); err != nil {
						o.close()
						return nil, fmt.Errorf("%s: %w", s.name, err)
					}
					if i >= overheadWarmUp { // the first ones open connections and fill caches
						set[j] = append(set[j], time.Since(t0))
					}
				}
			}
			o.close()
			for j := range set {
				res.all[first+j] = append(res.all[first+j], set[j]...)
				sortDurations(set[j])
				res.sets[first+j] = append(res.sets[first+j], percentile(set[j], 50))
			}
			first += n
		}
	}
	for j := range res.all {
		sortDurations(res.all[j])
	}
	return res, nil
}

// overheadInsert is Overhead for a one-row autocommit INSERT, through pgx's
// driver and pgrouted, pgxpool and pgrouted.Pool (all on the primary), its
// facts under prefix and its table titled title.
func overheadInsert(ctx context.Context, e *Env, d ovhDSNs, prefix, title string) (Table, error) {
	if err := e.Cluster.Primary().Exec(ctx, `
		DROP TABLE IF EXISTS ovh_ins;
		CREATE TABLE ovh_ins (id bigserial PRIMARY KEY, v text NOT NULL)`); err != nil {
		return Table{}, err
	}
	insert := func(ctx context.Context, db costDB, _ int) error {
		return db.exec(ctx, "INSERT INTO ovh_ins (v) VALUES ($1)", "x")
	}
	// Each pair takes turns on its own, as in Overhead.
	groups := []ovhGroup{{
		stacks: []ovhStack{{name: "pgx"}, {name: "pgrouted", base: "pgx"}},
		open: func(o *ovhOpener) ([]costDB, error) {
			return []costDB{o.sql(d.primary), o.routed(d.all)}, o.err
		},
	}, {
		stacks: []ovhStack{{name: "pgxpool"}, {name: "pgrouted.Pool", base: "pgxpool"}},
		open: func(o *ovhOpener) ([]costDB, error) {
			return []costDB{o.pool(d.primary), o.routedPool(d.one)}, o.err
		},
	}}
	res, err := interleave(ctx, e, groups, insert)
	if err != nil {
		return Table{}, err
	}
	t := Table{
		Title: title,
		Intro: fmt.Sprintf("A one-row autocommit `INSERT`, %d times through each stack, as above: pgx's database/sql driver straight to the primary and pgrouted "+
			"on the whole cluster, pgxpool straight to the primary and pgrouted.Pool on the primary and one replica (without a Session, the write's WAL position "+
			"is left to the first read that needs it: the write is pgx's one statement).", overheadRounds),
		Header: []string{"stack", "p50", "p90", "p99", "vs the baseline: the sets' p50 ratios"},
	}
	for j, s := range res.stacks {
		p50 := percentile(res.all[j], 50)
		vs := "baseline"
		if s.base != "" {
			vs = res.vsBase(e, prefix, j)
		}
		t.Add(s.name, p50, percentile(res.all[j], 90), percentile(res.all[j], 99), vs)
		e.Facts[prefix+"/"+s.name+"/p50_us"] = float64(p50) / 1e3
	}
	return t, nil
}
