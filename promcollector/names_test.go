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
		names := cellNames(cell)
		if len(names) == 0 {
			t.Fatalf("table cell %q names no series", cell)
		}
		want = append(want, names...)
	}

	f := fixed() // every series: the primary sessions' too (a PoolSource)
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
	want = slices.Compact(want) // a figure of several rows: a pool's connections
	if !slices.Equal(got, want) {
		t.Errorf("promcollector exports %v;\ndocs/observability.md's table names %v", got, want)
	}
}

// cellNames returns the metrics a cell of the table names: its backquoted
// words outside parentheses (which hold labels and their values).
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
