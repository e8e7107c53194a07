// Package workload holds the workload benchmarks of the bench module: one
// function per scenario (interleaved overhead, the servers' CPU per
// statement, read-your-writes, reads
// across processes under global consistency, a service's users writing
// and reading with replicas behind, failover,
// replica loss, memory),
// each running against the same testcluster and returning its results as
// Tables. cmd/workload runs them and writes RESULTS.md. To add one, write a
// func(ctx, *Env) ([]Table, error) and list it in Scenarios.
package workload

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/testcluster"
)

// Scenario is one workload benchmark.
type Scenario struct {
	Name string // for cmd/workload's -run flag
	Run  func(ctx context.Context, e *Env) ([]Table, error)
}

// Scenarios are the workload benchmarks, in the order RESULTS.md shows
// them.
var Scenarios = []Scenario{
	{"overhead", Overhead},
	{"server-cost", ServerCost},
	{"ryw", ReadYourWrites},
	{"global", Global},
	{"service", Service},
	{"failover", Failover},
	{"replica-loss", ReplicaLoss},
	{"memory", Memory},
	{"storm", Storm},
}

// Env is what a scenario runs against.
type Env struct {
	Cluster *testcluster.Cluster
	// Duration is how long each measured run of a steady workload lasts.
	Duration time.Duration
	// Logf reports progress (not part of the results).
	Logf func(format string, args ...any)
	// Facts collects single measurements that the summary of targets
	// quotes, by name.
	Facts map[string]float64
}

// Restore brings the cluster back to node0 primary with every replica
// streaming and no fault.
func (e *Env) Restore(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	return e.Cluster.Restore(ctx)
}

// SetReplicationDelay delays the WAL every replica receives by d (the
// fault point on its replication link; 0 removes it).
func (e *Env) SetReplicationDelay(d time.Duration) error {
	return e.SetReplicationDelays(d)
}

// SetReplicationDelays delays the WAL each replica receives: the first
// by ds[0], the next by ds[1], and so on (the last for the rest).
func (e *Env) SetReplicationDelays(ds ...time.Duration) error {
	if len(ds) == 0 {
		return fmt.Errorf("SetReplicationDelays: no delay")
	}
	for i, r := range e.Cluster.Replicas() {
		if err := r.ReplicationFault().Latency(ds[min(i, len(ds)-1)]); err != nil {
			return err
		}
	}
	return nil
}

// OpenRouted opens pgrouted on the whole cluster with the extra DSN keys
// (each "&key=value") and returns once reads go to a replica.
func (e *Env) OpenRouted(ctx context.Context, extra string) (*sql.DB, *pgrouted.Connector, error) {
	return e.openRouted(ctx, e.Cluster.DSN(), extra)
}

// OpenRoutedWith is OpenRouted with the parsed Config changed by tweak
// first (Config.OnRoute, which a DSN cannot carry).
func (e *Env) OpenRoutedWith(ctx context.Context, extra string, tweak func(*pgrouted.Config)) (*sql.DB, *pgrouted.Connector, error) {
	return e.openRoutedWith(ctx, e.Cluster.DSN(), extra, tweak)
}

// DirectDSN is the cluster's multi-host connection string (primary first)
// with the servers' own addresses instead of their fault points, which
// run in this process and hold buffers for every connection through them.
func (e *Env) DirectDSN() (string, error) {
	return e.DirectDSNOf(append([]*testcluster.Node{e.Cluster.Primary()}, e.Cluster.Replicas()...)...)
}

// DirectDSNOf is DirectDSN naming only the given nodes, in the given order
// (testcluster's DSNOf with the servers' own addresses). The fault points
// copy every byte in this process: through them, a one-row statement costs
// the client more CPU than it costs the server, which a 2-CPU machine
// shares with the servers. The workloads that compare costs and latencies
// of stacks reach the servers directly (every stack alike).
func (e *Env) DirectDSNOf(nodes ...*testcluster.Node) (string, error) {
	if len(nodes) == 0 {
		return "", fmt.Errorf("DirectDSNOf: no node")
	}
	u, err := url.Parse(nodes[0].DirectDSN())
	if err != nil {
		return "", err
	}
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.DirectAddr()
	}
	u.Host = strings.Join(addrs, ",")
	return u.String(), nil
}

func (e *Env) openRouted(ctx context.Context, dsn, extra string) (*sql.DB, *pgrouted.Connector, error) {
	return e.openRoutedWith(ctx, dsn, extra, nil)
}

func (e *Env) openRoutedWith(ctx context.Context, dsn, extra string, tweak func(*pgrouted.Config)) (*sql.DB, *pgrouted.Connector, error) {
	cfg, err := pgrouted.ParseConfig(dsn + extra)
	if err != nil {
		return nil, nil, err
	}
	if tweak != nil {
		tweak(cfg)
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		return nil, nil, err
	}
	db := sql.OpenDB(conn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := conn.Explain(ctx, "SELECT 1")
		if err == nil && !d.Primary {
			return db, conn, nil
		}
		if time.Now().After(deadline) {
			db.Close()
			return nil, nil, fmt.Errorf("reads do not go to a replica after 30s: %+v, %v", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// percentile returns the p-th percentile (0-100) of sorted ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(float64(len(ds)-1) * p / 100)
	return ds[i]
}

func sortDurations(ds []time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
}

// roundTrip is the median round trip of a trivial query to the first
// replica, straight through pgx's driver: the unit the replica wait's
// latency target is counted in.
func roundTrip(ctx context.Context, e *Env) (time.Duration, error) {
	db, err := sql.Open("pgx", e.Cluster.Replicas()[0].DSN())
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var ds []time.Duration
	for range 300 {
		t := time.Now()
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(t))
	}
	sortDurations(ds)
	return percentile(ds, 50), nil
}
