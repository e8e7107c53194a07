package workload

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/pgrouted/pgrouted"
)

// overheadRounds is how many times each stack runs the statement.
const overheadRounds = 4000

// Overhead measures the latency of a one-row SELECT by primary key through
// pgx's driver straight to the primary and straight to a replica, pgrouted
// forced to the primary and pgrouted on the replicas, and of a one-row
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
	pgx, err := sql.Open("pgx", e.Cluster.Primary().DSN())
	if err != nil {
		return nil, err
	}
	defer pgx.Close()
	pgxReplica, err := sql.Open("pgx", e.Cluster.Replicas()[0].DSN())
	if err != nil {
		return nil, err
	}
	defer pgxReplica.Close()
	routed, _, err := e.OpenRouted(ctx, "&pgrouted_probe_interval=250ms")
	if err != nil {
		return nil, err
	}
	defer routed.Close()
	stacks := []struct {
		name string
		db   *sql.DB
		ctx  context.Context
	}{
		{"pgx", pgx, ctx},
		{"pgx straight to a replica", pgxReplica, ctx},
		{"pgrouted, forced to the primary", routed, pgrouted.WithRoute(ctx, pgrouted.Primary)},
		{"pgrouted, reads on the replicas", routed, ctx},
	}
	lat := make([][]time.Duration, len(stacks))
	for i := range overheadRounds + 100 {
		for j, s := range stacks {
			var v string
			t0 := time.Now()
			if err := s.db.QueryRowContext(s.ctx, "SELECT v FROM ovh_kv WHERE id = $1", i%1000+1).Scan(&v); err != nil {
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
			"(after 100 rounds of warm-up), each statement timed on its own: pgx's database/sql driver straight to the primary and straight to a replica, pgrouted with "+
			"the statement routed to the primary (the same server as pgx), and pgrouted with reads on the replicas (compare with pgx straight to a replica).", overheadRounds),
		Header: []string{"stack", "p50", "p90", "p99", "p50 vs pgx", "p50 vs pgx straight to a replica"},
	}
	var base, replicaBase time.Duration
	for j, s := range stacks {
		sortDurations(lat[j])
		p50 := percentile(lat[j], 50)
		switch j {
		case 0:
			base = p50
		case 1:
			replicaBase = p50
		}
		vsReplica := ""
		if j > 0 {
			vsReplica = fmt.Sprintf("%+.1f%%", 100*(float64(p50)/float64(replicaBase)-1))
		}
		t.Add(s.name, p50, percentile(lat[j], 90), percentile(lat[j], 99), fmt.Sprintf("%+.1f%%", 100*(float64(p50)/float64(base)-1)), vsReplica)
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
