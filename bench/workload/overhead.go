package workload

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgrouted/pgrouted"
)

// overheadRounds is how many times each stack runs the statement.
const overheadRounds = 4000

// Overhead measures the latency of a one-row SELECT by primary key through
// pgx's driver straight to the primary, straight to a replica and
// alternating over the two replicas, pgrouted forced to the primary,
// pgrouted on the primary and that one replica, and pgrouted on the whole
// cluster (reads round-robin over the two replicas), and of a one-row
// autocommit INSERT through pgx's driver and pgrouted, one statement at a
// time and interleaved (pgx, forced, routed, pgx, ...), so that a change
// of load on the machine falls on every stack alike; medians resist the
// load's spikes better than the Go benchmarks' means.
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
	// Every stack reaches the servers directly, not through their fault
	// points (Env.DirectDSNOf).
	rs := e.Cluster.Replicas()
	dsnP, dsnR, dsnR2 := e.Cluster.Primary().DirectDSN(), rs[0].DirectDSN(), rs[1].DirectDSN()
	dsnAll, errAll := e.DirectDSN()
	dsnOne, errOne := e.DirectDSNOf(e.Cluster.Primary(), rs[0])
	if err := errors.Join(errAll, errOne); err != nil {
		return nil, err
	}
	pgx, err := sql.Open("pgx", dsnP)
	if err != nil {
		return nil, err
	}
	defer pgx.Close()
	pgxReplica, err := sql.Open("pgx", dsnR)
	if err != nil {
		return nil, err
	}
	defer pgxReplica.Close()
	pgxReplica2, err := sql.Open("pgx", dsnR2)
	if err != nil {
		return nil, err
	}
	defer pgxReplica2.Close()
	routed, _, err := e.openRouted(ctx, dsnAll, "&pgrouted_probe_interval=250ms")
	if err != nil {
		return nil, err
	}
	defer routed.Close()
	// pgrouted on the primary and the replica pgx reads from: its reads
	// go where pgx straight to a replica's go.
	routed1, _, err := e.openRouted(ctx, dsnOne, "&pgrouted_probe_interval=250ms")
	if err != nil {
		return nil, err
	}
	defer routed1.Close()
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
	// The pgx-native stacks are opened once the driver's have run (their
	// pools, and the Pool's probes, are not there while those run).
	var (
		poolP, poolR *pgxpool.Pool
		routedPool   *pgrouted.Pool
	)
	defer func() {
		for _, p := range []*pgxpool.Pool{poolP, poolR} {
			if p != nil {
				p.Close()
			}
		}
		if routedPool != nil {
			routedPool.Close()
		}
	}()
	forced := pgrouted.WithRoute(ctx, pgrouted.Primary)
	stacks := []ovhStack{
		{pgxName, costSQL{pgx}, ctx, ""},
		{replicaName, costSQL{pgxReplica}, ctx, ""},
		{altName, costAlt{dbs: []costDB{costSQL{pgxReplica}, costSQL{pgxReplica2}}, i: new(int)}, ctx, ""},
		{"pgrouted, forced to the primary", costSQL{routed}, forced, pgxName},
		{"pgrouted, 1 replica", costSQL{routed1}, ctx, replicaName},
		{"pgrouted, 2 replicas (round-robin)", costSQL{routed}, ctx, altName},
		{poolName, nil, ctx, ""},
		{poolRName, nil, ctx, ""},
		{"pgrouted.Pool, forced to the primary", nil, forced, poolName},
		{"pgrouted.Pool, 1 replica", nil, ctx, poolRName},
	}
	openPools := func() error {
		var err error
		if poolP, err = pgxpool.New(ctx, dsnP); err != nil {
			return err
		}
		if poolR, err = pgxpool.New(ctx, dsnR); err != nil {
			return err
		}
		if routedPool, err = pgrouted.NewPool(ctx, dsnOne+"&pgrouted_probe_interval=250ms"); err != nil {
			return err
		}
		stacks[6].db, stacks[7].db = costPool{poolP}, costPool{poolR}
		stacks[8].db, stacks[9].db = costPool{routedPool}, costPool{routedPool}
		return waitReplicaReads(ctx, routedPool.Connector())
	}
	// The driver's stacks take turns, then the pgx-native ones: each
	// statement's backend idles while the others of its group run, and
	// fewer at a time keep that as it is for pgx alone.
	lat, err := interleave(stacks, [][2]int{{0, 6}, {6, len(stacks)}}, read, func(g int) error {
		if g == 1 {
			return openPools()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	t := Table{
		Title: "Overhead, interleaved",
		Intro: fmt.Sprintf("A one-row `SELECT` by primary key, %d times through each stack, one statement at a time, the stacks taking turns "+
			"in an order that rotates from round to round (after 100 rounds of warm-up), each statement timed on its own: pgx's database/sql driver straight to the primary, straight to a replica, "+
			"and alternating over the two replicas statement by statement; pgrouted with the statement routed to the primary (the same server as pgx); "+
			"pgrouted opened on the primary and the replica pgx straight to a replica reads from (*1 replica*: its reads go to that server); and pgrouted on the "+
			"whole cluster, its reads round-robin over both replicas. Then, taking turns among themselves, pgx's pool (pgxpool) straight to the primary "+
			"and to that replica, and pgrouted.Pool opened on the primary and that replica, forced to the primary and not. The last column compares like with like: each pgrouted "+
			"stack with the pgx stack that reads the same servers the same way. Every stack connects to the servers' own addresses, not through testcluster's fault points "+
			"(which copy every byte in this process, at more CPU per statement than the server spends on it).", overheadRounds),
		Header: []string{"stack", "p50", "p90", "p99", "p50 vs pgx", "p50 vs pgx straight to a replica", "p50 vs pgx on the same servers"},
	}
	p50s := map[string]time.Duration{}
	for j, s := range stacks {
		sortDurations(lat[j])
		p50 := percentile(lat[j], 50)
		p50s[s.name] = p50
		vs := func(base string) string {
			if p50s[base] == 0 {
				return ""
			}
			return fmt.Sprintf("%+.1f%%", 100*(float64(p50)/float64(p50s[base])-1))
		}
		vsReplica, vsSame := "", ""
		if j > 0 {
			vsReplica = vs(replicaName)
		}
		if s.base != "" {
			vsSame = vs(s.base) + " (" + s.base + ")"
		}
		t.Add(s.name, p50, percentile(lat[j], 90), percentile(lat[j], 99), vs(pgxName), vsReplica, vsSame)
		e.Facts["overhead/"+s.name+"/p50_us"] = float64(p50) / 1e3
	}
	ins, err := overheadInsert(ctx, e, pgx, routed, poolP, routedPool)
	if err != nil {
		return nil, err
	}
	return []Table{t, ins}, nil
}

// ovhStack is one way to the servers in the overhead workload.
type ovhStack struct {
	name string
	db   costDB
	ctx  context.Context
	// base is the stack a like-for-like comparison is with (Overhead).
	base string
}

// interleave runs op through each stack overheadRounds times, after 100
// rounds of warm-up, one statement at a time: the stacks of each group
// (a range of stacks) take turns, in an order that rotates from round to
// round (no stack always follows the same one), one group after the
// other; before, called with a group's index, runs before it. It returns
// each stack's latencies.
func interleave(stacks []ovhStack, groups [][2]int, op func(ctx context.Context, db costDB, i int) error, before func(g int) error) ([][]time.Duration, error) {
	lat := make([][]time.Duration, len(stacks))
	for g, group := range groups {
		if err := before(g); err != nil {
			return nil, err
		}
		n := group[1] - group[0]
		for i := range overheadRounds + 100 {
			for k := range n {
				j := group[0] + (k+i)%n
				s := stacks[j]
				t0 := time.Now()
				if err := op(s.ctx, s.db, i); err != nil {
					return nil, fmt.Errorf("%s: %w", s.name, err)
				}
				if i >= 100 { // the first ones open connections and fill caches
					lat[j] = append(lat[j], time.Since(t0))
				}
			}
		}
	}
	return lat, nil
}

// overheadInsert is Overhead for a one-row autocommit INSERT, through pgx's
// driver and pgrouted, pgxpool and pgrouted.Pool (all on the primary).
func overheadInsert(ctx context.Context, e *Env, pgx, routed *sql.DB, pool *pgxpool.Pool, routedPool *pgrouted.Pool) (Table, error) {
	if err := e.Cluster.Primary().Exec(ctx, `
		DROP TABLE IF EXISTS ovh_ins;
		CREATE TABLE ovh_ins (id bigserial PRIMARY KEY, v text NOT NULL)`); err != nil {
		return Table{}, err
	}
	insert := func(ctx context.Context, db costDB, _ int) error {
		return db.exec(ctx, "INSERT INTO ovh_ins (v) VALUES ($1)", "x")
	}
	// Each pair takes turns on its own, as in Overhead.
	stacks := []ovhStack{{"pgx", costSQL{pgx}, ctx, ""}, {"pgrouted", costSQL{routed}, ctx, "pgx"},
		{"pgxpool", costPool{pool}, ctx, ""}, {"pgrouted.Pool", costPool{routedPool}, ctx, "pgxpool"}}
	lat, err := interleave(stacks, [][2]int{{0, 2}, {2, 4}}, insert, func(int) error { return nil })
	if err != nil {
		return Table{}, err
	}
	t := Table{
		Title: "Overhead, interleaved: INSERT",
		Intro: fmt.Sprintf("A one-row autocommit `INSERT`, %d times through each stack, as above: pgx's database/sql driver straight to the primary and pgrouted "+
			"on the whole cluster, pgxpool straight to the primary and pgrouted.Pool on the primary and one replica (without a Session, the write's WAL position "+
			"is left to the first read that needs it: the write is pgx's one statement).", overheadRounds),
		Header: []string{"stack", "p50", "p90", "p99", "p50 vs baseline"},
	}
	p50s := map[string]time.Duration{}
	for j, s := range stacks {
		sortDurations(lat[j])
		p50 := percentile(lat[j], 50)
		p50s[s.name] = p50
		vs := "baseline"
		if s.base != "" {
			vs = fmt.Sprintf("%+.1f%% (%s)", 100*(float64(p50)/float64(p50s[s.base])-1), s.base)
		}
		t.Add(s.name, p50, percentile(lat[j], 90), percentile(lat[j], 99), vs)
		e.Facts["overhead-insert/"+s.name+"/p50_us"] = float64(p50) / 1e3
	}
	return t, nil
}
