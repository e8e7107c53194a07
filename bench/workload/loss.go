package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// ReplicaLoss measures read latency and errors while a replica is killed
// and restarted: 8 readers read by primary key in a loop; after a steady
// phase node2 is killed (SIGKILL), then started again.
func ReplicaLoss(ctx context.Context, e *Env) ([]Table, error) {
	if err := e.Restore(ctx); err != nil {
		return nil, err
	}
	if err := e.Cluster.Primary().Exec(ctx, `
		CREATE TABLE IF NOT EXISTS loss_kv (id int PRIMARY KEY, v text);
		INSERT INTO loss_kv SELECT g, md5(g::text) FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING`); err != nil {
		return nil, err
	}
	if err := e.Cluster.WaitReplicated(ctx); err != nil {
		return nil, err
	}
	t := Table{
		Title: "Replica loss",
		Intro: "8 readers, SELECT by primary key in a loop: 3 s steady, then node2 is killed (SIGKILL of the postmaster and its children) " +
			"and stays down 4 s, then it is started again (crash recovery) and the readers go on 4 s. " +
			"pgrouted: probe interval 250 ms, default circuit settings; GORM + dbresolver: the two replicas, random policy.",
		Header: []string{"system", "phase", "reads", "errors", "p50", "p99", "max"},
	}
	systems := []rywSystem{rywSystems[0], rywSystems[len(rywSystems)-1]}
	for _, sys := range systems {
		e.Logf("replica loss: %s", sys.name)
		rows, err := runLoss(ctx, e, sys)
		if err != nil {
			return nil, fmt.Errorf("replica loss, %s: %w", sys.name, err)
		}
		t.Rows = append(t.Rows, rows...)
		if err := e.Restore(ctx); err != nil {
			return nil, err
		}
	}
	return []Table{t}, nil
}

type lossSample struct {
	phase int
	d     time.Duration
	err   bool
}

func runLoss(ctx context.Context, e *Env, sys rywSystem) ([][]string, error) {
	c, err := sys.open(ctx, e)
	if err != nil {
		return nil, err
	}
	defer c.close()
	var phase struct {
		sync.Mutex
		n int
	}
	getPhase := func() int { phase.Lock(); defer phase.Unlock(); return phase.n }
	setPhase := func(n int) { phase.Lock(); phase.n = n; phase.Unlock() }
	runCtx, cancel := context.WithCancel(ctx)
	var (
		mu      sync.Mutex
		samples []lossSample
		wg      sync.WaitGroup
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			var mine []lossSample
			for runCtx.Err() == nil {
				p := getPhase()
				t0 := time.Now()
				rctx, rc := context.WithTimeout(runCtx, 30*time.Second)
				err := c.read(rctx, rng.IntN(1000)+1)
				rc()
				if runCtx.Err() != nil {
					break
				}
				mine = append(mine, lossSample{p, time.Since(t0), err != nil})
			}
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
		}()
	}
	victim := e.Cluster.Node(2)
	time.Sleep(3 * time.Second)
	setPhase(1)
	if err := victim.Kill(ctx); err != nil {
		cancel()
		wg.Wait()
		return nil, err
	}
	time.Sleep(4 * time.Second)
	setPhase(2)
	if err := victim.Start(ctx); err != nil {
		cancel()
		wg.Wait()
		return nil, err
	}
	time.Sleep(4 * time.Second)
	cancel()
	wg.Wait()
	names := []string{"steady", "replica killed", "replica restarted"}
	var rows [][]string
	for p, name := range names {
		var ds []time.Duration
		errs := 0
		for _, s := range samples {
			if s.phase != p {
				continue
			}
			ds = append(ds, s.d)
			if s.err {
				errs++
			}
		}
		sortDurations(ds)
		rows = append(rows, []string{sys.name, name, fmt.Sprint(len(ds)), fmt.Sprint(errs), Dur(percentile(ds, 50)), Dur(percentile(ds, 99)), Dur(percentile(ds, 100))})
		e.Facts[fmt.Sprintf("loss/%s/%s/errors", sys.name, name)] = float64(errs)
	}
	return rows, nil
}
