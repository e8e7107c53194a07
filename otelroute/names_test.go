package otelroute_test

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/otelroute"
)

// namesTable returns the column col (1: Prometheus, 2: OpenTelemetry) of
// the table of metric names in docs/observability.md: the first
// backquoted name of each row, without the rows that have none ("—").
func namesTable(t *testing.T, col int) []string {
	t.Helper()
	doc, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "<!-- metric names: the test reads this table -->\n")
	if !ok {
		t.Fatal("docs/observability.md has no table of metric names")
	}
	var names []string
	for i, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if i < 2 {
			continue // the head and its rule
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			t.Fatalf("table row %q", line)
		}
		cell := strings.TrimSpace(cells[1+col])
		if cell == "—" {
			continue
		}
		_, rest, ok := strings.Cut(cell, "`")
		name, _, ok2 := strings.Cut(rest, "`")
		if !ok || !ok2 {
			t.Fatalf("table cell %q names no metric", cell)
		}
		names = append(names, name)
	}
	return names
}

// stub is a Source with every figure present.
type stub struct{}

func (stub) Stats() pgrouted.Stats { return pgrouted.Stats{} }
func (stub) Topology() pgrouted.Snapshot {
	lag, bound := uint64(10), 5*time.Millisecond
	return pgrouted.Snapshot{Primary: "a", Epoch: 1, LeaseRemaining: time.Second, Hosts: []pgrouted.HostInfo{
		{Name: "a", Role: "primary", Healthy: true, Circuit: "closed", RTT: time.Millisecond, Pool: pgrouted.PoolInfo{MaxConns: 4}},
		{Name: "b", Role: "standby", Healthy: true, Circuit: "closed", RTT: time.Millisecond, ByteLag: &lag, LagBound: &bound, Pool: pgrouted.PoolInfo{MaxConns: 4}},
	}}
}

// TestMetricNamesTable: the OpenTelemetry column of docs/observability.md's
// table of metric names is what otelroute exports, no more, no less.
func TestMetricNamesTable(t *testing.T) {
	tel := newTelemetry(t)
	reg, err := otelroute.RegisterMetrics(stub{}, otelroute.WithMeterProvider(tel.mp))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	cfg, err := pgrouted.ParseConfig("postgres://u@a:5432,b:5432/db?pgrouted_names=a,b")
	if err != nil {
		t.Fatal(err)
	}
	if err := otelroute.Instrument(cfg, otelroute.WithTracerProvider(tel.tp), otelroute.WithMeterProvider(tel.mp)); err != nil {
		t.Fatal(err)
	}
	cfg.OnRoute(pgrouted.RouteEvent{Decision: pgrouted.Decision{Op: pgrouted.OpRead, Endpoint: "b", Reason: pgrouted.ReasonReplica},
		Context: context.Background(), Query: "SELECT 1", Duration: time.Millisecond})
	got := slices.Sorted(maps.Keys(collect(t, tel)))
	want := namesTable(t, 2)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("otelroute exports %v;\ndocs/observability.md's table names %v", got, want)
	}
}
