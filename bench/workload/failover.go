package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// failoverIntervals are the probe intervals the failover runs at.
var failoverIntervals = []time.Duration{250 * time.Millisecond, time.Second}

// How the old primary goes in a failover run.
const (
	oldStopped = "stopped" // pg_ctl stop -m fast: its connections close
	oldFrozen  = "frozen"  // SIGSTOP: its connections stay open, unanswered
)

// Failover measures write unavailability across a failover: a writer
// inserts in a loop and 4 readers read in a loop through pgrouted; the
// benchmark stops the primary (fast shutdown) or freezes it (SIGSTOP, as
// a stalled machine would), and promotes node1. The unavailability is the
// time from the start of the stop or freeze to the end of the first
// successful write started after it.
func Failover(ctx context.Context, e *Env) ([]Table, error) {
	t := Table{
		Title: "Failover",
		Intro: "One writer (INSERT in a loop) and 4 readers (SELECT by primary key in a loop) through pgrouted; the benchmark stops the primary " +
			"(`pg_ctl stop -m fast`: its connections close) or freezes it (SIGSTOP of the postmaster and its children: its connections stay open and unanswered, " +
			"as with a stalled machine; `connect_timeout` is 30 s) and at once promotes a replica (`pg_ctl promote`, waited for). *Write unavailability* runs from the start of the stop or freeze " +
			"to the end of the first successful write started after it (writes wait for a primary, up to `pgrouted_write_timeout`). " +
			"Write errors are writes that failed after it (a write in flight on a frozen primary ends with `ErrOutcomeUnknown`: it may have run there). " +
			"Read errors are the reads that returned an error between the stop and 2 s after the first successful write.",
		Header: []string{"old primary", "probe interval", "stop/freeze + promote took", "write unavailability", "write errors", "reads", "read errors", "target (≤ interval + 1 s)"},
	}
	for _, how := range []string{oldStopped, oldFrozen} {
		for _, iv := range failoverIntervals {
			e.Logf("failover: primary %s, probe interval %v", how, iv)
			row, err := runFailover(ctx, e, iv, how)
			if err != nil {
				return nil, fmt.Errorf("failover (%s) at %v: %w", how, iv, err)
			}
			t.Rows = append(t.Rows, row)
		}
	}
	if err := e.Restore(ctx); err != nil {
		return nil, err
	}
	t.Notes = append(t.Notes, "pgx's driver or GORM with the old primary's address in their DSN do not recover at all without a configuration change; they are not in this table.")
	return []Table{t}, nil
}

func runFailover(ctx context.Context, e *Env, iv time.Duration, how string) ([]string, error) {
	if err := e.Restore(ctx); err != nil {
		return nil, err
	}
	if err := e.Cluster.Primary().Exec(ctx, `
		CREATE TABLE IF NOT EXISTS fo (id bigserial PRIMARY KEY, v int);
		CREATE TABLE IF NOT EXISTS fo_kv (id int PRIMARY KEY, v text);
		INSERT INTO fo_kv SELECT g, md5(g::text) FROM generate_series(1, 100) g ON CONFLICT DO NOTHING`); err != nil {
		return nil, err
	}
	if err := e.Cluster.WaitReplicated(ctx); err != nil {
		return nil, err
	}
	db, _, err := e.OpenRouted(ctx, fmt.Sprintf("&connect_timeout=30&pgrouted_probe_interval=%dms&pgrouted_lease=%dms&pgrouted_write_timeout=30s",
		iv.Milliseconds(), max(10*iv, 3*time.Second).Milliseconds()))
	if err != nil {
		return nil, err
	}
	defer db.Close()

	var (
		stopAt     atomic.Int64 // unix nanos, 0 before the stop
		firstWrite atomic.Int64 // end of the first successful write started after the stop
		writeErrs  atomic.Uint64
		reads      atomic.Uint64
		readErrs   atomic.Uint64
	)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for runCtx.Err() == nil {
			began := time.Now().UnixNano()
			wctx, c := context.WithTimeout(runCtx, 40*time.Second)
			_, err := db.ExecContext(wctx, "INSERT INTO fo (v) VALUES (1)")
			c()
			s := stopAt.Load()
			if err != nil {
				if s != 0 && runCtx.Err() == nil {
					writeErrs.Add(1)
				}
				continue
			}
			if s != 0 && began >= s {
				firstWrite.CompareAndSwap(0, time.Now().UnixNano())
			}
			time.Sleep(time.Millisecond)
		}
	}()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for runCtx.Err() == nil {
				var v string
				err := db.QueryRowContext(runCtx, "SELECT v FROM fo_kv WHERE id = $1", rng.IntN(100)+1).Scan(&v)
				if s := stopAt.Load(); s != 0 {
					fw := firstWrite.Load()
					if fw == 0 || time.Now().UnixNano() < fw+int64(2*time.Second) {
						reads.Add(1)
						if err != nil && runCtx.Err() == nil {
							readErrs.Add(1)
						}
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	time.Sleep(time.Second) // steady state
	old, next := e.Cluster.Primary(), e.Cluster.Node(1)
	t0 := time.Now()
	stopAt.Store(t0.UnixNano())
	if how == oldFrozen {
		if err := old.Freeze(ctx); err != nil {
			return nil, err
		}
		defer old.Thaw() // Restore also thaws it, and turns it into a replica
	} else if err := old.Stop(ctx); err != nil {
		return nil, err
	}
	if err := next.Promote(ctx); err != nil {
		return nil, err
	}
	took := time.Since(t0)
	deadline := time.Now().Add(60 * time.Second)
	for firstWrite.Load() == 0 {
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			return nil, fmt.Errorf("no successful write within 60s of the promotion")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	cancel()
	wg.Wait()
	unavail := time.Duration(firstWrite.Load() - t0.UnixNano())
	e.Facts[fmt.Sprintf("failover/%s/%v/unavail_ms", how, iv)] = float64(unavail) / 1e6
	met := "met"
	if unavail > iv+time.Second {
		met = "missed"
	}
	return []string{how, Dur(iv), Dur(took), Dur(unavail), fmt.Sprint(writeErrs.Load()), fmt.Sprint(reads.Load()), fmt.Sprint(readErrs.Load()), met}, nil
}
