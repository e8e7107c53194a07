package otelroute_test

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/otelroute"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// metricOf names the metric of each figure, by the field's path from its
// type: the fields of pgrouted.Stats, of pgrouted.HostInfo (a host in the
// Topology) and of pgrouted.PoolInfo (a pool: a host's replica pool in the
// Topology, pgrouted.pool.kind replica, and the primary sessions, Pool.Stat's
// Primary, pgrouted.pool.kind primary). A map of counters is one figure, its
// keys the metric's attributes.
var metricOf = map[string]string{
	"Stats.Statements":            "pgrouted.statements",
	"Stats.Fallbacks":             "pgrouted.fallbacks",
	"Stats.RouteErrors":           "pgrouted.route_errors",
	"Stats.ReadOnlyRetries":       "pgrouted.read_only_retries",
	"Stats.ReplicaRetries":        "pgrouted.replica_retries",
	"Stats.Failovers":             "pgrouted.failovers",
	"Stats.TimelineResets":        "pgrouted.timeline_resets",
	"Stats.LostWrites":            "pgrouted.lost_writes",
	"Stats.ForgedTokens":          "pgrouted.forged_tokens",
	"Stats.ProcessScopeReads":     "pgrouted.process_scope_reads",
	"Stats.FunctionRouted":        "pgrouted.function_routed",
	"Stats.FunctionPins":          "pgrouted.function_pins",
	"Stats.CatalogReads":          "pgrouted.catalog_reads",
	"Stats.ReplicaWaits":          "pgrouted.replica_waits",
	"Stats.ReplicaWaitTime":       "pgrouted.replica_wait_time",
	"Stats.ReplicaWaitTimeouts":   "pgrouted.replica_wait_timeouts",
	"Stats.ReplicaWaitsSkipped":   "pgrouted.replica_waits_skipped",
	"Stats.PositionFetches":       "pgrouted.position_fetches",
	"Stats.PositionFetchErrors":   "pgrouted.position_fetch_errors",
	"Stats.GlobalReads":           "pgrouted.global_reads",
	"Stats.DeferredPositionReads": "pgrouted.deferred_position_reads",
	"Stats.GlobalWaitTime":        "pgrouted.global_wait_time",
	"Stats.PositionsShared":       "pgrouted.positions_shared",
	"Stats.PrimaryReadWaits":      "pgrouted.primary_read_waits",
	"Stats.PrimaryReadsPeak":      "pgrouted.primary.reads_peak",

	"HostInfo.Role":            "pgrouted.host.role",
	"HostInfo.Healthy":         "pgrouted.host.healthy",
	"HostInfo.Circuit":         "pgrouted.host.circuit_open",
	"HostInfo.RTT":             "pgrouted.host.probe_rtt",
	"HostInfo.Timeline":        "pgrouted.host.timeline",
	"HostInfo.ByteLag":         "pgrouted.replica.lag",
	"HostInfo.LagBound":        "pgrouted.replica.lag_bound",
	"HostInfo.SyncState":       "pgrouted.replica.sync_state",
	"HostInfo.Pooler":          "pgrouted.host.pooler",
	"HostInfo.BackendSwitched": "pgrouted.host.pooler_backend_switched",
	"HostInfo.InflightReads":   "pgrouted.host.inflight_reads",
	"HostInfo.Budget":          "pgrouted.replica.budget_state",
	"HostInfo.BudgetChanges":   "pgrouted.replica.budget_changes",
	"HostInfo.NoReads":         "pgrouted.host.no_reads",
	"HostInfo.Discovered":      "pgrouted.host.discovered",
	"HostInfo.Untrusted":       "pgrouted.host.untrusted",

	"PoolInfo.AcquireCount":            "pgrouted.pool.acquires",
	"PoolInfo.AcquireDuration":         "pgrouted.pool.acquire_time",
	"PoolInfo.AcquiredConns":           "db.client.connection.count",
	"PoolInfo.CanceledAcquireCount":    "pgrouted.pool.canceled_acquires",
	"PoolInfo.ConstructingConns":       "pgrouted.pool.constructing_connections",
	"PoolInfo.EmptyAcquireCount":       "pgrouted.pool.empty_acquires",
	"PoolInfo.EmptyAcquireWaitTime":    "pgrouted.pool.empty_acquire_wait_time",
	"PoolInfo.IdleConns":               "db.client.connection.count",
	"PoolInfo.MaxConns":                "db.client.connection.max",
	"PoolInfo.NewConnsCount":           "pgrouted.pool.new_connections",
	"PoolInfo.MaxLifetimeDestroyCount": "pgrouted.pool.max_lifetime_destroys",
	"PoolInfo.MaxIdleDestroyCount":     "pgrouted.pool.max_idle_destroys",
}

// notMetrics are the fields that are deliberately no metric, each with
// why. promcollector's test of the same name keeps the same list.
var notMetrics = map[string]string{
	// A host's identity: the pgrouted.endpoint attribute of every
	// per-host metric.
	"HostInfo.Name": "the pgrouted.endpoint attribute of every per-host metric",
	// An address is not a figure; pgrouted.endpoint names the host.
	"HostInfo.Address": "an address, not a figure: pgrouted.endpoint names the host",
	// A WAL position as text; what it tells is pgrouted.replica.lag.
	"HostInfo.ReplayLSN": "a WAL position, not a figure: its distance to the primary's is pgrouted.replica.lag",
	// Error texts are unbounded attribute values; pgrouted.host.healthy
	// says a probe failed, the log and Topology say why.
	"HostInfo.LastError": "an error text (unbounded): pgrouted.host.healthy says the probe failed, Topology says why",
	// Grant names and refused statements' messages, told once by
	// Config.Logger when found (docs/privileges.md); no count to watch.
	"HostInfo.MissingPrivileges": "texts (grants, error messages) logged once when found: nothing to count or watch",
	// The topology provider's own names for the host: open-ended texts
	// (member names, Patroni's roles and states); what they decide is
	// pgrouted.host.no_reads and pgrouted.host.role.
	"HostInfo.Member":      "the provider's name for the host, a text: pgrouted.endpoint names it",
	"HostInfo.MemberRole":  "the provider's text (leader, replica, sync_standby, ...): its effect is pgrouted.host.role and pgrouted.host.no_reads",
	"HostInfo.MemberState": "the provider's text (running, streaming, ...): its effect is pgrouted.host.no_reads",
	// One of the causes NoReads sums up.
	"HostInfo.NoLoadBalance": "one of the causes of NoReads, which is pgrouted.host.no_reads",
	// AcquiredConns + ConstructingConns + IdleConns: the sum of
	// db.client.connection.count over its states and
	// pgrouted.pool.constructing_connections.
	"PoolInfo.TotalConns": "the sum of db.client.connection.count (idle, used) and pgrouted.pool.constructing_connections",
}

// TestEveryStatsFieldIsAMetric: every exported field of pgrouted.Stats,
// of pgrouted.HostInfo and of pgrouted.PoolInfo (reached from Stats and
// HostInfo, fields of struct type walked through) is in metricOf or in
// notMetrics; and each field of metricOf moves its metric: a Source with
// the field set to a mark (7777, 7777 s, true, a state) reports a point of
// the mark (7777 for a number, 1 for a state) that the same Source
// without it does not. A field added to Stats without a metric fails here.
func TestEveryStatsFieldIsAMetric(t *testing.T) {
	var paths []string
	walkFields(reflect.TypeFor[pgrouted.Stats](), &paths)
	walkFields(reflect.TypeFor[pgrouted.HostInfo](), &paths)
	for _, p := range paths {
		_, metric := metricOf[p]
		_, not := notMetrics[p]
		switch {
		case metric && not:
			t.Errorf("%s is in metricOf and in notMetrics", p)
		case !metric && !not:
			t.Errorf("%s has no metric: report it (and add it to docs/observability.md's table), or say in notMetrics why not", p)
		}
	}
	for p := range metricOf {
		if !slices.Contains(paths, p) {
			t.Errorf("metricOf names %s, which is no field", p)
		}
	}
	for p := range notMetrics {
		if !slices.Contains(paths, p) {
			t.Errorf("notMetrics names %s, which is no field", p)
		}
	}

	for _, p := range paths {
		name, ok := metricOf[p]
		if !ok {
			continue
		}
		typ, field, _ := strings.Cut(p, ".")
		base := markSource()
		marked := markSource()
		var want string
		switch typ {
		case "Stats":
			want = mark(t, p, reflect.ValueOf(&marked.st).Elem().FieldByName(field))
		case "HostInfo":
			want = mark(t, p, reflect.ValueOf(&marked.top.Hosts[0]).Elem().FieldByName(field))
		case "PoolInfo":
			want = mark(t, p, reflect.ValueOf(&marked.top.Hosts[0].Pool).Elem().FieldByName(field))
			mark(t, p, reflect.ValueOf(marked.pools[1].Primary).Elem().FieldByName(field))
		}
		checkMoved(t, p, name, want, "", base, marked)
		if typ == "PoolInfo" {
			// The same figure of the primary sessions, on the primary.
			checkMoved(t, p+" (primary sessions)", name, want, "pgrouted.pool.kind=primary", base, marked)
		}
	}
}

// walkFields appends to paths the exported fields of the struct type t,
// as Type.Field; a field of a struct type of package pgrouted is walked
// through (HostInfo.Pool: PoolInfo's fields), a map of counters or a
// pointer to a number is one figure.
func walkFields(t reflect.Type, paths *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if ft := f.Type; ft.Kind() == reflect.Struct && ft.PkgPath() == t.PkgPath() {
			walkFields(ft, paths)
			continue
		}
		*paths = append(*paths, t.Name()+"."+f.Name)
	}
}

// states are the marks of the fields that are states (strings): a value
// other than markSource's.
var states = map[string]string{
	"HostInfo.Role":      "unknown",
	"HostInfo.Circuit":   "open",
	"HostInfo.SyncState": "quorum",
	"HostInfo.Budget":    "ramp",
	"HostInfo.Untrusted": "not seen replicating yet",
}

// mark sets v, the field p, to its mark, and returns the value of the
// point that shows it.
func mark(t *testing.T, p string, v reflect.Value) string {
	t.Helper()
	const n = 7777
	switch {
	case v.Type() == reflect.TypeFor[time.Duration]():
		v.SetInt(int64(n * time.Second))
	case v.Kind() == reflect.Pointer && v.Type().Elem() == reflect.TypeFor[time.Duration]():
		d := n * time.Second
		v.Set(reflect.ValueOf(&d))
	case v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Uint64:
		u := uint64(n)
		v.Set(reflect.ValueOf(&u))
	case v.CanInt():
		v.SetInt(n)
	case v.CanUint():
		v.SetUint(n)
	case v.Kind() == reflect.Bool:
		v.SetBool(true)
		return "1"
	case v.Kind() == reflect.String:
		s, ok := states[p]
		if !ok {
			t.Fatalf("%s: a state with no mark in states", p)
		}
		v.SetString(s)
		return "1"
	case v.Kind() == reflect.Map:
		// A map of counters, by a key (endpoint, reason) and maybe by a
		// second one (op): the mark under new keys.
		m := reflect.MakeMap(v.Type())
		if v.Type().Elem().Kind() == reflect.Map {
			inner := reflect.MakeMap(v.Type().Elem())
			inner.SetMapIndex(reflect.ValueOf("marked-op").Convert(v.Type().Elem().Key()), reflect.ValueOf(uint64(n)).Convert(v.Type().Elem().Elem()))
			m.SetMapIndex(reflect.ValueOf("marked").Convert(v.Type().Key()), inner)
		} else {
			m.SetMapIndex(reflect.ValueOf("marked").Convert(v.Type().Key()), reflect.ValueOf(uint64(n)).Convert(v.Type().Elem()))
		}
		v.Set(m)
	default:
		t.Fatalf("%s: no mark for a %s", p, v.Type())
	}
	return strconv.Itoa(n)
}

// poolSource is a PoolSource with fixed answers.
type poolSource struct {
	st    pgrouted.Stats
	top   pgrouted.Snapshot
	pools []pgrouted.HostPool
}

func (s *poolSource) Stats() pgrouted.Stats       { return s.st }
func (s *poolSource) Topology() pgrouted.Snapshot { return s.top }
func (s *poolSource) Stat() []pgrouted.HostPool   { return s.pools }

var _ otelroute.PoolSource = (*poolSource)(nil)

// markSource is a Source with one standby, h, unhealthy, in the budget,
// with a topology provider, and the primary sessions on the primary p:
// each figure is reported, unmarked.
func markSource() *poolSource {
	return &poolSource{
		top: pgrouted.Snapshot{
			Primary: "p", Epoch: 1,
			Provider: &pgrouted.ProviderInfo{Name: "patroni"},
			Hosts: []pgrouted.HostInfo{
				{Name: "h", Role: "standby", Circuit: "closed", Budget: "in", Pool: pgrouted.PoolInfo{MaxConns: 4}},
				{Name: "p", Role: "primary", Healthy: true, Circuit: "closed", Pool: pgrouted.PoolInfo{MaxConns: 4}},
			},
		},
		pools: []pgrouted.HostPool{
			{Name: "h"},
			{Name: "p", Primary: &pgrouted.PoolInfo{MaxConns: 10}},
		},
	}
}

// checkMoved checks that the metric name of marked has a point of value
// want, with the attribute with when not empty, that base's lacks.
func checkMoved(t *testing.T, p, name, want, with string, base, marked *poolSource) {
	t.Helper()
	before, after := points(t, base)[name], points(t, marked)[name]
	for _, s := range after {
		if strings.HasSuffix(s, " "+want) && !slices.Contains(before, s) && strings.Contains(s, with) {
			return
		}
	}
	t.Errorf("%s: %s does not show it: %v before the mark %s, %v after", p, name, before, want, after)
}

// points returns what RegisterMetrics reports of src: per metric, its
// points as "key=value,... value", the keys sorted.
func points(t *testing.T, src otelroute.Source) map[string][]string {
	t.Helper()
	tel := newTelemetry(t)
	reg, err := otelroute.RegisterMetrics(src, otelroute.WithMeterProvider(tel.mp))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	out := map[string][]string{}
	for name, data := range collect(t, tel) {
		add := func(set attribute.Set, v float64) {
			var kv []string
			for _, a := range set.ToSlice() {
				kv = append(kv, string(a.Key)+"="+a.Value.String())
			}
			out[name] = append(out[name], strings.Join(kv, ",")+" "+strconv.FormatFloat(v, 'g', -1, 64))
		}
		switch d := data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				add(dp.Attributes, float64(dp.Value))
			}
		case metricdata.Sum[float64]:
			for _, dp := range d.DataPoints {
				add(dp.Attributes, dp.Value)
			}
		case metricdata.Gauge[float64]:
			for _, dp := range d.DataPoints {
				add(dp.Attributes, dp.Value)
			}
		default:
			t.Fatalf("%s: %s", name, fmt.Sprintf("%T", data))
		}
	}
	return out
}
