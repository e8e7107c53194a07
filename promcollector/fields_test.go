//go:build unix

package promcollector_test

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/promcollector"
	"github.com/prometheus/client_golang/prometheus"
)

// metricOf names the series of each figure, by the field's path from its
// type: the fields of pgrouted.Stats, of pgrouted.HostInfo (a host in the
// Topology) and of pgrouted.PoolInfo (a pool: a host's replica pool in the
// Topology, pgrouted_replica_pool_…, and the primary sessions, Pool.Stat's
// Primary, the same series named pgrouted_primary_pool_…). A map of
// counters is one figure, its keys the series' labels.
var metricOf = map[string]string{
	"Stats.Statements":            "pgrouted_statements_total",
	"Stats.Fallbacks":             "pgrouted_fallbacks_total",
	"Stats.RouteErrors":           "pgrouted_route_errors_total",
	"Stats.ReadOnlyRetries":       "pgrouted_read_only_retries_total",
	"Stats.ReplicaRetries":        "pgrouted_replica_retries_total",
	"Stats.Failovers":             "pgrouted_failovers_total",
	"Stats.TimelineResets":        "pgrouted_timeline_resets_total",
	"Stats.LostWrites":            "pgrouted_lost_writes_total",
	"Stats.ForgedTokens":          "pgrouted_forged_tokens_total",
	"Stats.ProcessScopeReads":     "pgrouted_process_scope_reads_total",
	"Stats.FunctionRouted":        "pgrouted_function_routed_total",
	"Stats.FunctionPins":          "pgrouted_function_pins_total",
	"Stats.CatalogReads":          "pgrouted_catalog_reads_total",
	"Stats.ReplicaWaits":          "pgrouted_replica_waits_total",
	"Stats.ReplicaWaitTime":       "pgrouted_replica_wait_seconds_total",
	"Stats.ReplicaWaitTimeouts":   "pgrouted_replica_wait_timeouts_total",
	"Stats.ReplicaWaitsSkipped":   "pgrouted_replica_waits_skipped_total",
	"Stats.PositionFetches":       "pgrouted_position_fetches_total",
	"Stats.PositionFetchErrors":   "pgrouted_position_fetch_errors_total",
	"Stats.GlobalReads":           "pgrouted_global_reads_total",
	"Stats.DeferredPositionReads": "pgrouted_deferred_position_reads_total",
	"Stats.GlobalWaitTime":        "pgrouted_global_wait_seconds_total",
	"Stats.PositionsShared":       "pgrouted_positions_shared_total",
	"Stats.PrimaryReadWaits":      "pgrouted_primary_read_waits_total",
	"Stats.PrimaryReadsPeak":      "pgrouted_primary_reads_peak",

	"HostInfo.Role":            "pgrouted_role",
	"HostInfo.Healthy":         "pgrouted_healthy",
	"HostInfo.Circuit":         "pgrouted_circuit_open",
	"HostInfo.RTT":             "pgrouted_probe_rtt_seconds",
	"HostInfo.Timeline":        "pgrouted_timeline",
	"HostInfo.ByteLag":         "pgrouted_replica_lag_bytes",
	"HostInfo.LagBound":        "pgrouted_replica_lag_bound_seconds",
	"HostInfo.SyncState":       "pgrouted_sync_state",
	"HostInfo.Pooler":          "pgrouted_pooler",
	"HostInfo.BackendSwitched": "pgrouted_pooler_backend_switched",
	"HostInfo.InflightReads":   "pgrouted_inflight_reads",
	"HostInfo.Budget":          "pgrouted_budget_state",
	"HostInfo.BudgetChanges":   "pgrouted_budget_changes_total",
	"HostInfo.NoReads":         "pgrouted_topology_provider_no_reads",
	"HostInfo.Discovered":      "pgrouted_discovered",
	"HostInfo.Untrusted":       "pgrouted_untrusted",

	"PoolInfo.AcquireCount":            "pgrouted_replica_pool_acquires_total",
	"PoolInfo.AcquireDuration":         "pgrouted_replica_pool_acquire_seconds_total",
	"PoolInfo.AcquiredConns":           "pgrouted_replica_pool_connections",
	"PoolInfo.CanceledAcquireCount":    "pgrouted_replica_pool_canceled_acquires_total",
	"PoolInfo.ConstructingConns":       "pgrouted_replica_pool_connections",
	"PoolInfo.EmptyAcquireCount":       "pgrouted_replica_pool_empty_acquires_total",
	"PoolInfo.EmptyAcquireWaitTime":    "pgrouted_replica_pool_empty_acquire_wait_seconds_total",
	"PoolInfo.IdleConns":               "pgrouted_replica_pool_connections",
	"PoolInfo.MaxConns":                "pgrouted_replica_pool_max_connections",
	"PoolInfo.NewConnsCount":           "pgrouted_replica_pool_new_connections_total",
	"PoolInfo.MaxLifetimeDestroyCount": "pgrouted_replica_pool_max_lifetime_destroys_total",
	"PoolInfo.MaxIdleDestroyCount":     "pgrouted_replica_pool_max_idle_destroys_total",
}

// notMetrics are the fields that are deliberately no metric, each with
// why. otelroute's test of the same name keeps the same list.
var notMetrics = map[string]string{
	// A host's identity: the endpoint label of every per-host series.
	"HostInfo.Name": "the endpoint label of every per-host series",
	// An address is not a figure; the endpoint label names the host.
	"HostInfo.Address": "an address, not a figure: the endpoint label names the host",
	// A WAL position as text; what it tells is pgrouted_replica_lag_bytes.
	"HostInfo.ReplayLSN": "a WAL position, not a figure: its distance to the primary's is pgrouted_replica_lag_bytes",
	// Error texts are unbounded label values; pgrouted_healthy says a
	// probe failed, the log and Topology say why.
	"HostInfo.LastError": "an error text (unbounded): pgrouted_healthy says the probe failed, Topology says why",
	// Grant names and refused statements' messages, told once by
	// Config.Logger when found (docs/privileges.md); no count to watch.
	"HostInfo.MissingPrivileges": "texts (grants, error messages) logged once when found: nothing to count or watch",
	// The topology provider's own names for the host: open-ended texts
	// (member names, Patroni's roles and states); what they decide is
	// pgrouted_topology_provider_no_reads and pgrouted_role.
	"HostInfo.Member":      "the provider's name for the host, a text: the endpoint label names it",
	"HostInfo.MemberRole":  "the provider's text (leader, replica, sync_standby, ...): its effect is pgrouted_role and pgrouted_topology_provider_no_reads",
	"HostInfo.MemberState": "the provider's text (running, streaming, ...): its effect is pgrouted_topology_provider_no_reads",
	// One of the causes NoReads sums up.
	"HostInfo.NoLoadBalance": "one of the causes of NoReads, which is pgrouted_topology_provider_no_reads",
	// AcquiredConns + ConstructingConns + IdleConns: the sum of
	// pgrouted_replica_pool_connections over its state label.
	"PoolInfo.TotalConns": "the sum of pgrouted_*_pool_connections over state (idle, acquired, constructing)",
}

// TestEveryStatsFieldIsAMetric: every exported field of pgrouted.Stats,
// of pgrouted.HostInfo and of pgrouted.PoolInfo (reached from Stats and
// HostInfo, fields of struct type walked through) is in metricOf or in
// notMetrics; and each field of metricOf moves its series: a Source with
// the field set to a mark (7777, 7777 s, true, a state) exports a sample
// of the mark (7777 for a number, 1 for a state) that the same Source
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
			t.Errorf("%s has no metric: export it (and add it to docs/observability.md's table), or say in notMetrics why not", p)
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
			// The same figure of the primary sessions, on the primary.
			mark(t, p, reflect.ValueOf(marked.pools[1].Primary).Elem().FieldByName(field))
		}
		checkMoved(t, p, name, want, base, marked)
		if typ == "PoolInfo" {
			checkMoved(t, p+" (primary sessions)", strings.Replace(name, "_replica_pool_", "_primary_pool_", 1), want, base, marked)
		}
	}
}

// walkFields appends to paths the exported fields of the struct type t,
// as Type.Field; a field of a struct type of package pgrouted is walked
// through (HostInfo.Pool: PoolInfo's fields), a struct or map of counters
// or a pointer to a number is one figure.
func walkFields(t reflect.Type, paths *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Struct && ft.PkgPath() == t.PkgPath() {
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
// sample that shows it.
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

// markSource is a Source with one standby, h, unhealthy, in the budget,
// with a topology provider, and the primary sessions on the primary p: each
// figure is exported, unmarked.
func markSource() *fake {
	return &fake{
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

// checkMoved checks that the series name of marked has a sample of value
// want that base's lacks.
func checkMoved(t *testing.T, p, name, want string, base, marked *fake) {
	t.Helper()
	before, after := samples(t, base)[name], samples(t, marked)[name]
	for _, s := range after {
		if strings.HasSuffix(s, " "+want) && !slices.Contains(before, s) {
			return
		}
	}
	t.Errorf("%s: %s does not show it: %v before the mark %s, %v after", p, name, before, want, after)
}

// samples returns src's series as a Collector exports them: per name, its
// samples as "label=value,... value".
func samples(t *testing.T, src promcollector.Source) map[string][]string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promcollector.New(src))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[mf.GetName()] = append(out[mf.GetName()], strings.Join(labels, ",")+" "+strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	return out
}
