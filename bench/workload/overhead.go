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
// pgx's driver, pgrouted forced to the primary and pgrouted on the
// replicas, one statement at a time and interleaved (pgx, forced, routed,
// pgx, ...), so that a change of load on the machine falls on all three
// alike; medians resist the load's spikes better than the Go benchmarks'
// means.
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
			"(after 100 rounds of warm-up), each statement timed on its own: pgx's database/sql driver straight to the primary, pgrouted with "+
			"the statement routed to the primary (the same server), and pgrouted with reads on the replicas.", overheadRounds),
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
		e.Facts["overhead/"+s.name+"/p50_us"] = float64(p50) / 1e3
	}
	return []Table{t}, nil
}
