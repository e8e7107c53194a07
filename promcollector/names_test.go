//go:build unix

package promcollector_test

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/promcollector"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricNamesTable: the Prometheus column of docs/observability.md's
// table of metric names (the same figures' OpenTelemetry names beside
// them, checked by otelroute's test of the same name) is what the
// collector exports, no more, no less.
func TestMetricNamesTable(t *testing.T) {
	doc, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "<!-- metric names: the test reads this table -->\n")
	if !ok {
		t.Fatal("docs/observability.md has no table of metric names")
	}
	var want []string
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
		cell := strings.TrimSpace(cells[2])
		if cell == "—" {
			continue
		}
		_, rest, ok := strings.Cut(cell, "`")
		name, _, ok2 := strings.Cut(rest, "`")
		if !ok || !ok2 {
			t.Fatalf("table cell %q names no series", cell)
		}
		want = append(want, name)
	}

	f := fixed()
	f.top.Provider = &pgrouted.ProviderInfo{Name: "patroni", Endpoint: "http://pg-a:8008", Leader: "east", LeaderTimeline: 4, LeaseRemaining: 2500 * time.Millisecond}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promcollector.New(f))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		got = append(got, mf.GetName())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("promcollector exports %v;\ndocs/observability.md's table names %v", got, want)
	}
}
