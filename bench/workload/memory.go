package workload

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/pgrouted/pgrouted"
)

const idleConns = 100

// Memory measures the steady-state heap of a *sql.DB holding 100 idle
// connections, through pgx's driver (one host) and through pgrouted (3
// hosts: each database/sql connection with its primary session, and the
// replicas' pools), and the allocations of one read.
func Memory(ctx context.Context, e *Env) ([]Table, error) {
	if err := e.Restore(ctx); err != nil {
		return nil, err
	}
	if err := e.Cluster.Primary().Exec(ctx, `
		CREATE TABLE IF NOT EXISTS mem_kv (id int PRIMARY KEY, v text);
		INSERT INTO mem_kv SELECT g, md5(g::text) FROM generate_series(1, 100) g ON CONFLICT DO NOTHING`); err != nil {
		return nil, err
	}
	if err := e.Cluster.WaitReplicated(ctx); err != nil {
		return nil, err
	}
	t := Table{
		Title: "Memory",
		Intro: fmt.Sprintf("Heap in use after runtime.GC() (runtime.MemStats.HeapAlloc), less the same before the *sql.DB was opened, once it holds %d idle connections "+
			"(%d concurrent `SELECT pg_sleep(0.2)`, with `pgrouted_read_functions=pg_sleep`; all of them forced to the primary for pgrouted so that each connection has its primary session, "+
			"then as many concurrent reads on the replicas so that their pools fill too), connected to the servers' own addresses "+
			"(not through testcluster's fault points, which run in the benchmark's process and hold buffers for every connection). Allocations per read: testing.AllocsPerRun of a one-row SELECT by primary key, serially.",
			idleConns, idleConns),
		Header: []string{"driver", "hosts", "heap", "heap per connection", "allocs per read"},
	}
	// The servers' own addresses: the fault points run in this process and
	// would count their buffers for every connection.
	direct, err := e.DirectDSN()
	if err != nil {
		return nil, err
	}
	type variant struct {
		name, hosts string
		open        func() (*sql.DB, error)
		readCtx     context.Context
	}
	variants := []variant{
		{"pgx stdlib", "1", func() (*sql.DB, error) { return sql.Open("pgx", e.Cluster.Primary().DirectDSN()) }, ctx},
		{"pgrouted", "3", func() (*sql.DB, error) {
			db, _, err := e.openRouted(ctx, direct, fmt.Sprintf("&pgrouted_probe_interval=250ms&pgrouted_read_functions=pg_sleep&pgrouted_replica_max_conns=%d", idleConns/2))
			return db, err
		}, ctx},
		{"pgrouted, forced to the primary", "3", func() (*sql.DB, error) {
			db, _, err := e.openRouted(ctx, direct, "&pgrouted_probe_interval=250ms&pgrouted_read_functions=pg_sleep")
			return db, err
		}, pgrouted.WithRoute(ctx, pgrouted.Primary)},
	}
	for _, v := range variants {
		e.Logf("memory: %s", v.name)
		before := heap()
		db, err := v.open()
		if err != nil {
			return nil, err
		}
		db.SetMaxIdleConns(idleConns)
		db.SetMaxOpenConns(idleConns)
		if err := fill(pgrouted.WithRoute(ctx, pgrouted.Primary), db); err != nil {
			db.Close()
			return nil, err
		}
		if v.hosts == "3" {
			if err := fill(ctx, db); err != nil {
				db.Close()
				return nil, err
			}
		}
		after := heap()
		used := int64(after) - int64(before)
		var readErr error
		allocs := testing.AllocsPerRun(2000, func() {
			var s string
			if err := db.QueryRowContext(v.readCtx, "SELECT v FROM mem_kv WHERE id = 1").Scan(&s); err != nil {
				readErr = err
			}
		})
		if n := db.Stats().Idle; n < idleConns {
			e.Logf("memory: %s: %d idle connections, want %d", v.name, n, idleConns)
		}
		db.Close()
		if readErr != nil {
			return nil, readErr
		}
		t.Add(v.name, v.hosts, fmt.Sprintf("%.2f MiB", float64(used)/(1<<20)), fmt.Sprintf("%.1f KiB", float64(used)/idleConns/1024), fmt.Sprintf("%.0f", allocs))
		e.Facts["memory/"+v.name+"/allocs_per_read"] = allocs
		e.Facts["memory/"+v.name+"/heap_mib"] = float64(used) / (1 << 20)
	}
	return []Table{t}, nil
}

// fill runs idleConns concurrent slow statements on db, so that it opens
// that many connections and keeps them idle afterwards.
func fill(ctx context.Context, db *sql.DB) error {
	var wg sync.WaitGroup
	errs := make(chan error, idleConns)
	for range idleConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s string
			if err := db.QueryRowContext(ctx, "SELECT pg_sleep(0.2)::text").Scan(&s); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func heap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
