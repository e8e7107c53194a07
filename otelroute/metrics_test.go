package otelroute_test

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/otelroute"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// collected is one collection of the in-memory reader, by metric name.
type collected map[string]metricdata.Aggregation

func collect(t *testing.T, tel *telemetry) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := collected{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelroute.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// key renders the values of keys in a data point's attributes.
func key(set attribute.Set, keys ...attribute.Key) string {
	var parts []string
	for _, k := range keys {
		v, _ := set.Value(k)
		parts = append(parts, v.String())
	}
	return strings.Join(parts, "/")
}

// sums returns a counter's values by the values of keys.
func (c collected) sums(t *testing.T, name string, keys ...attribute.Key) map[string]uint64 {
	t.Helper()
	s, ok := c[name].(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: %T, want an int64 counter", name, c[name])
	}
	if !s.IsMonotonic || s.Temporality != metricdata.CumulativeTemporality {
		t.Errorf("%s: monotonic %v, temporality %v; want a cumulative counter", name, s.IsMonotonic, s.Temporality)
	}
	out := map[string]uint64{}
	for _, dp := range s.DataPoints {
		out[key(dp.Attributes, keys...)] = uint64(dp.Value)
	}
	return out
}

// updowns returns an up-down counter's values by the values of keys.
func (c collected) updowns(t *testing.T, name string, keys ...attribute.Key) map[string]int64 {
	t.Helper()
	s, ok := c[name].(metricdata.Sum[int64])
	if !ok || s.IsMonotonic {
		t.Fatalf("%s: %T (monotonic %v), want an int64 up-down counter", name, c[name], s.IsMonotonic)
	}
	out := map[string]int64{}
	for _, dp := range s.DataPoints {
		out[key(dp.Attributes, keys...)] = dp.Value
	}
	return out
}

// gauges returns a gauge's values by endpoint (and the values of keys).
func (c collected) gauges(t *testing.T, name string, keys ...attribute.Key) map[string]float64 {
	t.Helper()
	g, ok := c[name].(metricdata.Gauge[float64])
	if !ok {
		t.Fatalf("%s: %T, want a float64 gauge", name, c[name])
	}
	out := map[string]float64{}
	for _, dp := range g.DataPoints {
		out[key(dp.Attributes, append([]attribute.Key{otelroute.AttrEndpoint}, keys...)...)] = dp.Value
	}
	return out
}

// nonZero drops the zero values.
func nonZero[V comparable](m map[string]V) map[string]V {
	var zero V
	maps.DeleteFunc(m, func(_ string, v V) bool { return v == zero })
	return m
}

// TestMetricsMatchStats: what the in-memory reader collects equals the
// Connector's Stats and Topology at the same instant, for the counters
// (statements by endpoint and op, fallbacks and route errors by reason,
// retries, failovers, lost writes) and the hosts' state (role, health,
// circuit, current primary, replica lag bound); and the duration
// histogram, which the hook records statement by statement, counts as many
// statements per endpoint and op as Stats.
func TestMetricsMatchStats(t *testing.T) {
	ctx := testCtx(t)
	tel := newTelemetry(t)
	db, conn := open(t, tel, nil, nil)
	reg, err := otelroute.RegisterMetrics(conn, otelroute.WithMeterProvider(tel.mp))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	if err := cluster.Primary().Exec(ctx, "CREATE TABLE IF NOT EXISTS otel_m (id bigserial PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	for i := 0; i < 5; i++ {
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO otel_m (v) VALUES ('m')"); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.QueryRowContext(pgrouted.WithMaxLag(ctx, 0), "SELECT 2").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(pgrouted.WithRoute(ctx, pgrouted.Replica), "INSERT INTO otel_m (v) VALUES ('no')"); err == nil {
		t.Fatal("a write forced to a replica ran")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() // on a failure: an open transaction would hold DB.Close
	if _, err := tx.ExecContext(ctx, "INSERT INTO otel_m (v) VALUES ('t')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	// One instant: Stats the same before and after the collection (a
	// catalog read may land in between; then again), and the standbys'
	// lag bounds known.
	var (
		got       collected
		st        pgrouted.Stats
		top, top2 pgrouted.Snapshot
	)
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, top = conn.Stats(), conn.Topology()
		got = collect(t, tel)
		top2 = conn.Topology()
		stable := reflect.DeepEqual(st, conn.Stats()) && hostState(top) == hostState(top2)
		if stable && strings.Count(hostState(top), "bound") == len(cluster.Replicas()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no quiet instant with every standby's lag bound known in 45s: %s", hostState(top2))
		}
	}
	if st.Fallbacks[pgrouted.ReasonBehind] == 0 || st.RouteErrors[pgrouted.ReasonWriteOnReplica] == 0 || st.Statements[cluster.Primary().Name()][pgrouted.OpWrite] < 3 {
		t.Fatalf("Stats lack what the test ran: %+v", st)
	}

	wantStatements := map[string]uint64{}
	for e, byOp := range st.Statements {
		for op, v := range byOp {
			wantStatements[e+"/"+op] = v
		}
	}
	for _, c := range []struct {
		name string
		got  map[string]uint64
		want map[string]uint64
	}{
		{"pgrouted.statements", got.sums(t, "pgrouted.statements", otelroute.AttrEndpoint, otelroute.AttrOp), wantStatements},
		{"pgrouted.fallbacks", got.sums(t, "pgrouted.fallbacks", otelroute.AttrReason), reasonKeyed(st.Fallbacks)},
		{"pgrouted.route_errors", got.sums(t, "pgrouted.route_errors", otelroute.AttrReason), reasonKeyed(st.RouteErrors)},
		{"pgrouted.read_only_retries", got.sums(t, "pgrouted.read_only_retries"), map[string]uint64{"": st.ReadOnlyRetries}},
		{"pgrouted.replica_retries", got.sums(t, "pgrouted.replica_retries"), map[string]uint64{"": st.ReplicaRetries}},
		{"pgrouted.failovers", got.sums(t, "pgrouted.failovers"), map[string]uint64{"": st.Failovers}},
		{"pgrouted.lost_writes", got.sums(t, "pgrouted.lost_writes"), map[string]uint64{"": st.LostWrites}},
		{"pgrouted.timeline_resets", got.sums(t, "pgrouted.timeline_resets"), map[string]uint64{"": st.TimelineResets}},
		{"pgrouted.function_routed", got.sums(t, "pgrouted.function_routed"), map[string]uint64{"": st.FunctionRouted}},
		{"pgrouted.catalog_reads", got.sums(t, "pgrouted.catalog_reads"), map[string]uint64{"": st.CatalogReads}},
	} {
		if g, w := nonZero(c.got), nonZero(c.want); !maps.Equal(g, w) {
			t.Errorf("%s = %v, Stats say %v", c.name, g, w)
		}
	}
	// Every op and known reason is there from the start, at 0.
	if s := got.sums(t, "pgrouted.statements", otelroute.AttrEndpoint, otelroute.AttrOp); len(s) != 4*len(top.Hosts) {
		t.Errorf("pgrouted.statements has %d series, want every op of every host: %v", len(s), s)
	}
	if _, ok := got.sums(t, "pgrouted.fallbacks", otelroute.AttrReason)[string(pgrouted.ReasonUnhealthy)]; !ok {
		t.Error("pgrouted.fallbacks has no series for reason unhealthy before any")
	}

	wantHosts := map[string]map[string]float64{
		"pgrouted.host.circuit_open": {}, "pgrouted.host.healthy": {}, "pgrouted.host.current_primary": {}, "pgrouted.replica.lag_bound": {},
	}
	for _, h := range top.Hosts {
		wantHosts["pgrouted.host.circuit_open"][h.Name] = b(h.Circuit == "open")
		wantHosts["pgrouted.host.healthy"][h.Name] = b(h.Healthy)
		wantHosts["pgrouted.host.current_primary"][h.Name] = b(h.Name == top.Primary)
		if h.LagBound != nil {
			wantHosts["pgrouted.replica.lag_bound"][h.Name] = -1 // present
		}
	}
	for name, want := range wantHosts {
		g := got.gauges(t, name)
		if name == "pgrouted.replica.lag_bound" {
			for e, v := range g {
				if v < 0 {
					t.Errorf("%s{%s} = %v, a negative bound", name, e, v)
				}
				g[e] = -1
			}
		}
		if !maps.Equal(g, want) {
			t.Errorf("%s = %v, Topology says %v", name, g, want)
		}
	}
	roles := nonZero(got.gauges(t, "pgrouted.host.role", otelroute.AttrHostRole))
	wantRoles := map[string]float64{}
	for _, h := range top.Hosts {
		wantRoles[h.Name+"/"+h.Role] = 1
	}
	if !maps.Equal(roles, wantRoles) {
		t.Errorf("pgrouted.host.role = %v, Topology says %v", roles, wantRoles)
	}

	// The replica pools, under the semantic conventions' names.
	wantMax, wantConns := map[string]int64{}, map[string]int64{}
	for _, h := range top.Hosts {
		wantMax[h.Name] = int64(h.Pool.MaxConns)
		wantConns[h.Name+"/idle"] = int64(h.Pool.IdleConns)
		wantConns[h.Name+"/used"] = int64(h.Pool.AcquiredConns)
	}
	if g := got.updowns(t, "db.client.connection.max", "db.client.connection.pool.name"); !maps.Equal(g, wantMax) {
		t.Errorf("db.client.connection.max = %v, Topology says %v", g, wantMax)
	}
	// The counts move with the pools (a connection opened or closed
	// between two reads): every pool has both states, within its size.
	g := got.updowns(t, "db.client.connection.count", "db.client.connection.pool.name", "db.client.connection.state")
	if !slices.Equal(slices.Sorted(maps.Keys(g)), slices.Sorted(maps.Keys(wantConns))) {
		t.Errorf("db.client.connection.count = %v, want a series per pool and state (idle, used): %v", g, slices.Sorted(maps.Keys(wantConns)))
	}
	for _, h := range top.Hosts {
		if n := g[h.Name+"/idle"] + g[h.Name+"/used"]; g[h.Name+"/idle"] < 0 || g[h.Name+"/used"] < 0 || n > int64(h.Pool.MaxConns) {
			t.Errorf("db.client.connection.count of %s: %v idle, %v used, max %d", h.Name, g[h.Name+"/idle"], g[h.Name+"/used"], h.Pool.MaxConns)
		}
	}

	// The histogram, from the hook, against Stats, from the Connector.
	h, ok := got["db.client.operation.duration"].(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("db.client.operation.duration: %T", got["db.client.operation.duration"])
	}
	counted := map[string]uint64{}
	for _, dp := range h.DataPoints {
		if _, ok := dp.Attributes.Value(otelroute.AttrEndpoint); ok {
			counted[key(dp.Attributes, otelroute.AttrEndpoint, otelroute.AttrOp)] += dp.Count
		}
		if v, _ := dp.Attributes.Value("db.system.name"); v.AsString() != "postgresql" {
			t.Errorf("duration point without db.system.name=postgresql: %v", dp.Attributes.ToSlice())
		}
	}
	if !maps.Equal(counted, wantStatements) {
		t.Errorf("db.client.operation.duration counts %v, Stats say %v", counted, wantStatements)
	}
	if s := fmt.Sprint(got); strings.Contains(s, marker) {
		t.Error("a metric holds the password")
	}
	t.Logf("metrics: %v", slices.Sorted(maps.Keys(got)))
}

func b(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// hostState renders what the gauges compared above depend on.
func hostState(s pgrouted.Snapshot) string {
	var parts []string
	for _, h := range s.Hosts {
		p := fmt.Sprintf("%s:%s:%v:%s:%v", h.Name, h.Role, h.Healthy, h.Circuit, h.Name == s.Primary)
		if h.LagBound != nil {
			p += ":bound"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

// reasonKeyed is m keyed by the reasons' text, as the metrics' attributes
// carry them.
func reasonKeyed(m map[pgrouted.Reason]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for r, n := range m {
		out[string(r)] = n
	}
	return out
}
