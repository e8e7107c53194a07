package workload

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted"
)

const (
	globalReaders = 32
	globalWriters = 4
)

// globalSystem is one way of reading under the cross-process workload.
type globalSystem struct {
	name  string
	extra string                                    // DSN keys
	ctx   func(ctx context.Context) context.Context // the readers' context
}

var globalSystems = []globalSystem{
	{"pgrouted global + replica_wait=10ms", "&pgrouted_consistency=global&pgrouted_replica_wait=10ms", nil},
	{"pgrouted global", "&pgrouted_consistency=global", nil},
	{"pgrouted session, no token", "&pgrouted_replica_wait=10ms", nil},
	{"primary only (pgrouted, WithRoute Primary)", "", func(ctx context.Context) context.Context { return pgrouted.WithRoute(ctx, pgrouted.Primary) }},
}

// globalDSNKeys are the keys of every reader.
const globalDSNKeys = "&pgrouted_probe_interval=250ms&pgrouted_replica_max_conns=32"

// Global is the cross-process read-your-writes workload: 4 writers on one
// pgrouted (one "process") insert rows as fast as they can; 32 readers on
// another pgrouted (another "process", with no token from the writers)
// each read, in a loop, the last row acknowledged before the read began.
// A miss is a read that does not find it.
func Global(ctx context.Context, e *Env) ([]Table, error) {
	if err := e.Restore(ctx); err != nil {
		return nil, err
	}
	if err := e.Cluster.Primary().Exec(ctx, `DROP TABLE IF EXISTS gx; CREATE TABLE gx (id bigint PRIMARY KEY)`); err != nil {
		return nil, err
	}
	if err := e.Cluster.WaitReplicated(ctx); err != nil {
		return nil, err
	}
	t := Table{
		Title: "Cross-process reads: global consistency",
		Intro: fmt.Sprintf("%d writers on one pgrouted insert rows in a loop; %d readers on another pgrouted (another process: no token passes) each read, in a loop, "+
			"the last row acknowledged before the read began. A *miss* is a read that does not find it. %v per run, replication delayed on both replicas' links "+
			"by the delay shown. *Fetches per read*: reads of the primary's WAL position (Stats.PositionFetches) per global read; the primary sees one such query "+
			"per fetch. Reader DSN keys `%s` plus the system's.",
			globalWriters, globalReaders, e.Duration, globalDSNKeys[1:]),
		Header: []string{"system", "delay", "reads", "misses", "errors", "replica share", "read p50", "read p99", "fetches per read", "mean position wait"},
	}
	for _, d := range rywDelays {
		for _, sys := range globalSystems {
			if err := e.SetReplicationDelay(d); err != nil {
				return nil, err
			}
			e.Logf("global: %s at %v", sys.name, d)
			r, err := runGlobal(ctx, e, sys)
			if err != nil {
				return nil, fmt.Errorf("%s at %v: %w", sys.name, d, err)
			}
			fetches, wait := "-", "-"
			if r.globalReads > 0 {
				fetches = fmt.Sprintf("%.3f", float64(r.fetches)/float64(r.globalReads))
				wait = Dur(r.globalWait / time.Duration(r.globalReads))
			}
			t.Add(sys.name, Dur(d), r.reads, r.misses, r.errs, Pct(r.replicaShare), r.p50, r.p99, fetches, wait)
			key := fmt.Sprintf("global/%s/%v", sys.name, d)
			e.Facts[key+"/misses"] = float64(r.misses)
			e.Facts[key+"/share"] = r.replicaShare
			if r.globalReads > 0 {
				e.Facts[key+"/fetches_per_read"] = float64(r.fetches) / float64(r.globalReads)
			}
		}
	}
	if err := e.SetReplicationDelay(0); err != nil {
		return nil, err
	}
	t.Notes = append(t.Notes,
		"Under global consistency each read waits for a position of the primary read after it began (shared: one read of it in flight at a time, "+
			"the reads that arrive meanwhile wait for the next), then needs it on its replica: proven by a probe, checked in the read's pipeline, or "+
			"waited for (replica_wait); else the primary. Session consistency without the writer's token has nothing to wait for: its reads miss "+
			"what the other process just wrote. Primary-only never misses and serves nothing from replicas.")
	return []Table{t}, nil
}

type globalResult struct {
	reads, misses, errs  uint64
	replicaShare         float64
	p50, p99             time.Duration
	fetches, globalReads uint64
	globalWait           time.Duration
}

func runGlobal(ctx context.Context, e *Env, sys globalSystem) (globalResult, error) {
	wdb, _, err := e.OpenRouted(ctx, "&pgrouted_probe_interval=250ms")
	if err != nil {
		return globalResult{}, err
	}
	defer wdb.Close()
	rdb, rconn, err := e.OpenRouted(ctx, globalDSNKeys+sys.extra)
	if err != nil {
		return globalResult{}, err
	}
	defer rdb.Close()
	rdb.SetMaxIdleConns(globalReaders)
	rctx := ctx
	if sys.ctx != nil {
		rctx = sys.ctx(ctx)
	}

	var (
		res      globalResult
		acked    atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		misses   atomic.Uint64
		errs     atomic.Uint64
		firstErr atomic.Value
	)
	fail := func(err error) {
		errs.Add(1)
		firstErr.CompareAndSwap(nil, err)
	}
	// The writers start first, so that the readers have a row to read.
	if _, err := wdb.ExecContext(ctx, "INSERT INTO gx VALUES ($1)", rywNextID.Add(1)); err != nil {
		return res, err
	}
	runCtx, cancel := context.WithTimeout(ctx, e.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for range globalWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				id := rywNextID.Add(1)
				if _, err := wdb.ExecContext(ctx, "INSERT INTO gx VALUES ($1)", id); err != nil {
					fail(err)
					continue
				}
				for {
					cur := acked.Load()
					if id <= cur || acked.CompareAndSwap(cur, id) {
						break
					}
				}
			}
		}()
	}
	for acked.Load() == 0 && runCtx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	st0 := rconn.Stats()
	rep0, all0 := readCounts(rconn)
	for range globalReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var my []time.Duration
			for runCtx.Err() == nil {
				id := acked.Load() // acknowledged before the read begins
				t0 := time.Now()
				var got int64
				err := rdb.QueryRowContext(rctx, "SELECT id FROM gx WHERE id = $1", id).Scan(&got)
				d := time.Since(t0)
				switch {
				case errors.Is(err, sql.ErrNoRows):
					misses.Add(1)
				case err != nil:
					fail(err)
					continue
				}
				my = append(my, d)
			}
			mu.Lock()
			lat = append(lat, my...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	st1 := rconn.Stats()
	rep1, all1 := readCounts(rconn)
	res.reads, res.misses, res.errs = uint64(len(lat)), misses.Load(), errs.Load()
	if all1 > all0 {
		res.replicaShare = float64(rep1-rep0) / float64(all1-all0)
	}
	sortDurations(lat)
	res.p50, res.p99 = percentile(lat, 50), percentile(lat, 99)
	res.fetches = st1.PositionFetches - st0.PositionFetches
	res.globalReads = st1.GlobalReads - st0.GlobalReads
	res.globalWait = st1.GlobalWaitTime - st0.GlobalWaitTime
	if v := firstErr.Load(); v != nil {
		e.Logf("global: %s: %d errors, first: %v", sys.name, res.errs, v)
	}
	return res, nil
}

// readCounts counts conn's reads so far: on replicas, and in all.
func readCounts(conn *pgrouted.Connector) (replica, all uint64) {
	st := conn.Stats()
	primary := conn.Topology().Primary
	for ep, ops := range st.Statements {
		all += ops[pgrouted.OpRead]
		if ep != primary {
			replica += ops[pgrouted.OpRead]
		}
	}
	return replica, all
}
