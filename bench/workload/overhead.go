package workload

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

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
	)
	stacks := []struct {
		name string
		dbs  []*sql.DB // the statements take turns over them
		ctx  context.Context
		// base is the stack a like-for-like comparison is with.
		base string
	}{
		{pgxName, []*sql.DB{pgx}, ctx, ""},
		{replicaName, []*sql.DB{pgxReplica}, ctx, ""},
		{altName, []*sql.DB{pgxReplica, pgxReplica2}, ctx, ""},
		{"pgrouted, forced to the primary", []*sql.DB{routed}, pgrouted.WithRoute(ctx, pgrouted.Primary), pgxName},
		{"pgrouted, 1 replica", []*sql.DB{routed1}, ctx, replicaName},
		{"pgrouted, 2 replicas (round-robin)", []*sql.DB{routed}, ctx, altName},
	}
	lat := make([][]time.Duration, len(stacks))
	for i := range overheadRounds + 100 {
		for j, s := range stacks {
			var v string
			db := s.dbs[i%len(s.dbs)]
			t0 := time.Now()
			if err := db.QueryRowContext(s.ctx, "SELECT v FROM ovh_kv WHERE id = $1", i%1000+1).Scan(&v); err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			if i >= 100 { // the first ones open connections and fill caches
				lat[j] = append(lat[j], time.Since(t0))
			}
		}
	}
	t := Table{
		Title: "Overhead, interleaved",
		Intro: fmt.Sprintf("A one-row `SELECT` by primary key, %d times through each stack, one statement at a time, the stacks taking turns "+
			"(after 100 rounds of warm-up), each statement timed on its own: pgx's database/sql driver straight to the primary, straight to a replica, "+
			"and alternating over the two replicas statement by statement; pgrouted with the statement routed to the primary (the same server as pgx); "+
			"pgrouted opened on the primary and the replica pgx straight to a replica reads from (*1 replica*: its reads go to that server); and pgrouted on the "+
			"whole cluster, its reads round-robin over both replicas. The last column compares like with like: each pgrouted stack with the pgx stack that "+
			"reads the same servers the same way. Every stack connects to the servers' own addresses, not through testcluster's fault points "+
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
	ins, err := overheadInsert(ctx, e, pgx, routed)
	if err != nil {
		return nil, err
	}
	return []Table{t, ins}, nil
}

// overheadInsert is Overhead for a one-row autocommit INSERT, through pgx's
// driver and pgrouted (both on the primary).
func overheadInsert(ctx context.Context, e *Env, pgx, routed *sql.DB) (Table, error) {
	if err := e.Cluster.Primary().Exec(ctx, `
		DROP TABLE IF EXISTS ovh_ins;
		CREATE TABLE ovh_ins (id bigserial PRIMARY KEY, v text NOT NULL)`); err != nil {
		return Table{}, err
	}
	stacks := []struct {
		name string
		db   *sql.DB
	}{{"pgx", pgx}, {"pgrouted", routed}}
	lat := make([][]time.Duration, len(stacks))
	for i := range overheadRounds + 100 {
		for j, s := range stacks {
			t0 := time.Now()
			if _, err := s.db.ExecContext(ctx, "INSERT INTO ovh_ins (v) VALUES ($1)", "x"); err != nil {
				return Table{}, fmt.Errorf("%s: %w", s.name, err)
			}
			if i >= 100 {
				lat[j] = append(lat[j], time.Since(t0))
			}
		}
	}
	t := Table{
		Title: "Overhead, interleaved: INSERT",
		Intro: fmt.Sprintf("A one-row autocommit `INSERT`, %d times through each stack, as above: pgx's database/sql driver straight to the primary, and pgrouted "+
			"(which reads the WAL position after the commit, pipelined with the write, for read-your-writes).", overheadRounds),
		Header: []string{"stack", "p50", "p90", "p99", "p50 vs pgx"},
	}
	var base time.Duration
	for j, s := range stacks {
		sortDurations(lat[j])
		p50 := percentile(lat[j], 50)
		if j == 0 {
			base = p50
		}
		t.Add(s.name, p50, percentile(lat[j], 90), percentile(lat[j], 99), fmt.Sprintf("%+.1f%%", 100*(float64(p50)/float64(base)-1)))
		e.Facts["overhead-insert/"+s.name+"/p50_us"] = float64(p50) / 1e3
	}
	return t, nil
}
