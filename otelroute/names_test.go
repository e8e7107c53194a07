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
// the table of metric names in docs/observability.md: the backquoted names
// of each row outside parentheses (which hold attributes and their
// values), without the rows that have none ("—"), each once.
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
		cn := cellNames(cell)
		if len(cn) == 0 {
			t.Fatalf("table cell %q names no metric", cell)
		}
		names = append(names, cn...)
	}
	slices.Sort(names)
	return slices.Compact(names) // a figure of several rows: a pool's connections
}

// cellNames returns the metrics a cell of the table names: its backquoted
// words outside parentheses.
func cellNames(cell string) []string {
	var names []string
	depth := 0
	for i := 0; i < len(cell); i++ {
		switch cell[i] {
		case '(':
			depth++
		case ')':
			depth--
		case '`':
			j := strings.IndexByte(cell[i+1:], '`')
			if j < 0 {
				return names
			}
			if depth == 0 {
				names = append(names, cell[i+1:i+1+j])
			}
			i += j + 1
		}
	}
	return names
}

// stub is a PoolSource with every figure present: a standby's sync state
// and budget, a topology provider, the primary sessions.
type stub struct{}

func (stub) Stats() pgrouted.Stats { return pgrouted.Stats{} }
func (stub) Topology() pgrouted.Snapshot {
	lag, bound := uint64(10), 5*time.Millisecond
	return pgrouted.Snapshot{Primary: "a", Epoch: 1, LeaseRemaining: time.Second, Provider: &pgrouted.ProviderInfo{Name: "patroni"}, Hosts: []pgrouted.HostInfo{
		{Name: "a", Role: "primary", Healthy: true, Circuit: "closed", RTT: time.Millisecond, Timeline: 2, Pool: pgrouted.PoolInfo{MaxConns: 4}},
		{Name: "b", Role: "standby", Healthy: true, Circuit: "closed", RTT: time.Millisecond, ByteLag: &lag, LagBound: &bound, Timeline: 2,
			SyncState: "async", Budget: "in", Pool: pgrouted.PoolInfo{MaxConns: 4}},
	}}
}
func (stub) Stat() []pgrouted.HostPool {
	return []pgrouted.HostPool{{Name: "a", Primary: &pgrouted.PoolInfo{MaxConns: 10}}, {Name: "b"}}
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
	if !slices.Equal(got, want) {
		t.Errorf("otelroute exports %v;\ndocs/observability.md's table names %v", got, want)
	}
}
