package otelroute_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/otelroute"
	"github.com/pgrouted/pgrouted/testcluster"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// cluster is this package's primary with two streaming replicas, started
// once. Tests that break it restore it.
var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{
		Replicas: 2,
		Logf:     func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	}, func(c *testcluster.Cluster) { cluster = c })
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func restore(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := cluster.Restore(ctx); err != nil {
			t.Fatalf("restore cluster: %v", err)
		}
	})
}

// marker is a password that must appear in no span and no metric. Trust
// authentication ignores it.
const marker = "hunter2marker"

// telemetry is an in-memory trace and metric pipeline.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() {
		tel.tp.Shutdown(context.Background())
		tel.mp.Shutdown(context.Background())
	})
	return tel
}

// names are the nodes' names in the order of cluster.DSN().
func names() []string {
	ns := []string{cluster.Primary().Name()}
	for _, r := range cluster.Replicas() {
		ns = append(ns, r.Name())
	}
	return ns
}

// open opens a *sql.DB through a Connector instrumented by otelroute with
// tel's providers and opts, on the cluster's DSN with a marker password,
// hosts named node0, node1, node2, and extra DSN parameters; tweak (when
// not nil) changes the Config first. It waits until reads go to a replica.
func open(t *testing.T, tel *telemetry, tweak func(*pgrouted.Config), opts []otelroute.Option, extra ...string) (*sql.DB, *pgrouted.Connector) {
	t.Helper()
	dsn := strings.Replace(cluster.DSN(), "postgres@", "postgres:"+marker+"@", 1) +
		"&pgrouted_probe_interval=100ms&pgrouted_lease=5s&pgrouted_write_timeout=20s&pgrouted_names=" + strings.Join(names(), ",")
	for _, e := range extra {
		dsn += "&" + e
	}
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(cfg)
	}
	opts = append([]otelroute.Option{otelroute.WithTracerProvider(tel.tp), otelroute.WithMeterProvider(tel.mp)}, opts...)
	if err := otelroute.Instrument(cfg, opts...); err != nil {
		t.Fatal(err)
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	deadline := time.Now().Add(45 * time.Second)
	for {
		d, err := conn.Explain(context.Background(), "SELECT 1")
		if err == nil && !d.Primary && d.Reason == pgrouted.ReasonReplica && conn.Topology().Primary != "" {
			break
		}
		if time.Now().After(deadline) {
			top, _ := json.Marshal(conn.Topology())
			t.Fatalf("reads still do not go to a replica after 45s: %+v, %v; topology: %s", d, err, top)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return db, conn
}
