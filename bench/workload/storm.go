package workload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted"
)

// Lag storm (issue 52): both replicas' replay paused for stormPaused
// under 8 writers and 16 readers, without and with
// pgrouted_primary_read_limit.
const (
	stormWriters = 8
	stormReaders = 16
	stormBefore  = 3 * time.Second // steady, before the pause
	stormPaused  = 5 * time.Second
	stormAfter   = 4 * time.Second // after replay resumed
	// stormMaxLag is the readers' staleness budget: the pause outlasts it.
	stormMaxLag = time.Second
	// stormBucket is the resolution of the return to the replicas.
	stormBucket = 100 * time.Millisecond
	// stormReadWait is the readers' wait budget (WithReplicaWait): what a
	// read past the limit may wait for a slot or a replica.
	stormReadWait = 50 * time.Millisecond
)

// stormCase is one row of the lag storm.
type stormCase struct {
	name  string
	limit int // pgrouted_primary_read_limit; 0: none
}

var stormCases = []stormCase{
	{"no limit (default)", 0},
	{"pgrouted_primary_read_limit=2", 2},
}

// Storm measures a lag storm: 8 writers insert rows through one pgrouted,
// 16 readers read the newest row's time through another (their reads
// need no position: the staleness budget alone decides), with
// pgrouted_max_lag=1s; after stormBefore both replicas' replay is paused
// (pg_wal_replay_pause) for stormPaused, then resumed.
func Storm(ctx context.Context, e *Env) ([]Table, error) {
	t := Table{
		Title: "Lag storm",
		Intro: fmt.Sprintf("%d writers insert rows (an autocommit INSERT of `now()`) in a loop through one pgrouted; %d readers read the newest row's time (`SELECT max(at)`, by index) in a loop through another, "+
			"with `pgrouted_max_lag=%v&pgrouted_probe_interval=100ms` and a wait budget of %v per read (WithReplicaWait: what a read past the limit may wait for a slot or a replica; their reads need no position, so no replica wait happens). "+
			"%v steady, then both replicas' replay is paused (`pg_wal_replay_pause()`) for %v, then resumed, %v more. "+
			"*Write p99*: the writers' INSERTs, before the pause and during it. *Reads failed*: reads past the limit whose wait ran out (primary-busy). "+
			"*Stale*: reads served by a replica that lacked a row committed more than the budget (plus 100 ms) before the read began. "+
			"*Back on replicas*: from the resume to the first %v in which replicas served at least 90%% of the reads. "+
			"*State changes*: each replica's budget gate changes (HostInfo.BudgetChanges: out, back).",
			stormWriters, stormReaders, stormMaxLag, stormReadWait, stormBefore, stormPaused, stormAfter, stormBucket),
		Header: []string{"case", "write p99 before", "write p99 during", "ratio", "reads", "on replicas during", "reads failed", "stale", "back on replicas (≥ 90%)", "state changes per replica", "most fallback reads at once"},
	}
	for _, c := range stormCases {
		e.Logf("lag storm: %s", c.name)
		row, err := runStorm(ctx, e, c)
		if err != nil {
			return nil, fmt.Errorf("lag storm, %s: %w", c.name, err)
		}
		t.Rows = append(t.Rows, row)
	}
	if err := e.Restore(ctx); err != nil {
		return nil, err
	}
	return []Table{t}, nil
}

// stormRead is one read's outcome.
type stormRead struct {
	at      time.Duration // since the start, when it began
	replica bool
	failed  bool
	stale   bool
}

func runStorm(ctx context.Context, e *Env, c stormCase) ([]string, error) {
	if err := e.Restore(ctx); err != nil {
		return nil, err
	}
	if err := e.Cluster.Primary().Exec(ctx, `
		DROP TABLE IF EXISTS storm_rows;
		CREATE TABLE storm_rows (id bigserial PRIMARY KEY, at timestamptz NOT NULL);
		CREATE INDEX ON storm_rows (at);
		INSERT INTO storm_rows (at) VALUES (now())`); err != nil {
		return nil, err
	}
	if err := e.Cluster.WaitReplicated(ctx); err != nil {
		return nil, err
	}
	wdb, _, err := e.OpenRouted(ctx, "&pgrouted_probe_interval=100ms")
	if err != nil {
		return nil, err
	}
	defer wdb.Close()
	wdb.SetMaxOpenConns(stormWriters)
	wdb.SetMaxIdleConns(stormWriters)
	extra := fmt.Sprintf("&pgrouted_probe_interval=100ms&pgrouted_max_lag=%v&pgrouted_replica_max_conns=%d", stormMaxLag, stormReaders)
	if c.limit > 0 {
		extra += fmt.Sprintf("&pgrouted_primary_read_limit=%d", c.limit)
	}
	rdb, rconn, err := e.OpenRoutedWith(ctx, extra, func(cfg *pgrouted.Config) { cfg.OnRoute = stormHook })
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	rdb.SetMaxOpenConns(stormReaders)
	rdb.SetMaxIdleConns(stormReaders)
	var changes0 []uint64
	for _, h := range rconn.Topology().Hosts {
		if h.Role == "standby" {
			changes0 = append(changes0, h.BudgetChanges)
		}
	}

	start := time.Now()
	pauseAt, resumeAt := stormBefore, stormBefore+stormPaused
	end := resumeAt + stormAfter
	runCtx, cancel := context.WithTimeout(ctx, end+30*time.Second)
	defer cancel()
	var stop atomic.Bool
	var mu sync.Mutex
	var writesBefore, writesDuring []time.Duration
	var reads []stormRead
	var firstErr error
	var wg sync.WaitGroup
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		stop.Store(true)
	}
	for range stormWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var before, during []time.Duration
			for !stop.Load() {
				t0 := time.Now()
				if _, err := wdb.ExecContext(runCtx, "INSERT INTO storm_rows (at) VALUES (now())"); err != nil {
					fail(fmt.Errorf("write: %w", err))
					return
				}
				d := time.Since(t0)
				switch at := t0.Sub(start); {
				case at < pauseAt:
					before = append(before, d)
				case at < resumeAt:
					during = append(during, d)
				}
			}
			mu.Lock()
			writesBefore = append(writesBefore, before...)
			writesDuring = append(writesDuring, during...)
			mu.Unlock()
		}()
	}
	// Which host served each read: the readers' connector reports it.
	rctx := pgrouted.WithReplicaWait(runCtx, stormReadWait)
	for range stormReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []stormRead
			for !stop.Load() {
				t0 := time.Now()
				var newest time.Time
				var ev routeCapture
				err := rdb.QueryRowContext(withCapture(rctx, &ev), "SELECT max(at) FROM storm_rows").Scan(&newest)
				r := stormRead{at: t0.Sub(start)}
				var re *pgrouted.RouteError
				switch {
				case errors.As(err, &re) && re.Reason == pgrouted.ReasonPrimaryBusy:
					r.failed = true
				case err != nil:
					fail(fmt.Errorf("read: %w", err))
					return
				default:
					r.replica = !ev.primary
					// Every row committed before t0 - budget must be there;
					// rows come every few ms.
					r.stale = r.replica && newest.Before(t0.Add(-stormMaxLag-100*time.Millisecond))
				}
				mine = append(mine, r)
			}
			mu.Lock()
			reads = append(reads, mine...)
			mu.Unlock()
		}()
	}

	// The storm.
	pauseErr := func() error {
		time.Sleep(time.Until(start.Add(pauseAt)))
		for _, r := range e.Cluster.Replicas() {
			if err := r.PauseReplay(ctx); err != nil {
				return err
			}
		}
		time.Sleep(time.Until(start.Add(resumeAt)))
		for _, r := range e.Cluster.Replicas() {
			if err := r.ResumeReplay(ctx); err != nil {
				return err
			}
		}
		time.Sleep(time.Until(start.Add(end)))
		return nil
	}()
	stop.Store(true)
	wg.Wait()
	if pauseErr != nil {
		return nil, pauseErr
	}
	if firstErr != nil {
		return nil, firstErr
	}

	sortDurations(writesBefore)
	sortDurations(writesDuring)
	p99b, p99d := percentile(writesBefore, 99), percentile(writesDuring, 99)
	var failed, stale, during, duringReplica int
	buckets := map[int][2]int{} // after the resume: reads, on replicas
	for _, r := range reads {
		if r.failed {
			failed++
		}
		if r.stale {
			stale++
		}
		if r.at >= pauseAt && r.at < resumeAt {
			during++
			if r.replica {
				duringReplica++
			}
		}
		if r.at >= resumeAt {
			i := int((r.at - resumeAt) / stormBucket)
			b := buckets[i]
			b[0]++
			if r.replica {
				b[1]++
			}
			buckets[i] = b
		}
	}
	back := "never"
	var backD time.Duration = -1
	for i := 0; time.Duration(i)*stormBucket < stormAfter; i++ {
		if b := buckets[i]; b[0] > 0 && float64(b[1]) >= 0.9*float64(b[0]) {
			backD = time.Duration(i+1) * stormBucket
			back = "≤ " + Dur(backD)
			break
		}
	}
	var changes string
	var most uint64
	i := 0
	for _, h := range rconn.Topology().Hosts {
		if h.Role != "standby" {
			continue
		}
		n := h.BudgetChanges
		if i < len(changes0) {
			n -= changes0[i]
		}
		i++
		most = max(most, n)
		if changes != "" {
			changes += ", "
		}
		changes += fmt.Sprintf("%s %d", h.Name, n)
	}
	ratio := float64(p99d) / float64(p99b)
	key := "storm/" + c.name + "/"
	e.Facts[key+"write_p99_ratio"] = ratio
	e.Facts[key+"failed"] = float64(failed)
	e.Facts[key+"stale"] = float64(stale)
	e.Facts[key+"back_ms"] = float64(backD) / 1e6
	e.Facts[key+"changes_max"] = float64(most)
	peak := "-"
	if c.limit > 0 {
		peak = fmt.Sprint(rconn.Stats().PrimaryReadsPeak)
	}
	share := 0.0
	if during > 0 {
		share = float64(duringReplica) / float64(during)
	}
	return []string{c.name, Dur(p99b), Dur(p99d), fmt.Sprintf("%.2f×", ratio), fmt.Sprint(len(reads)), Pct(share),
		fmt.Sprint(failed), fmt.Sprint(stale), back, changes, peak}, nil
}

// routeCapture is where a read's RouteEvent said it ran.
type routeCapture struct{ primary bool }

type captureKey struct{}

// withCapture returns ctx carrying c, which stormHook fills.
func withCapture(ctx context.Context, c *routeCapture) context.Context {
	return context.WithValue(ctx, captureKey{}, c)
}

// stormHook records a read's endpoint in its context's routeCapture.
func stormHook(ev pgrouted.RouteEvent) {
	if c, ok := ev.Context.Value(captureKey{}).(*routeCapture); ok && ev.Op == pgrouted.OpRead {
		c.primary = ev.Primary
	}
}
