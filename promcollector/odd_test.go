//go:build unix

package promcollector_test

import (
	"context"
	"database/sql"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/promcollector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// oddSource is a Source whose names no Connector accepts any more: a host
// name and a Stats endpoint that are not UTF-8, a reason that is not
// either, a provider endpoint that is not, a name with a direction
// override and one with an escape sequence; beside them an ordinary one.
func oddSource() *fake {
	f := fixed()
	f.top.Hosts[0].Name = "east\xff"
	f.top.Primary = "east\xff"
	f.pools[0].Name = "east\xff"
	f.top.Hosts[2].Name = "\u202etsae"
	f.top.Hosts[1].Name = "we\x1b[2Jst"
	f.st.Statements["gone\xfe"] = map[string]uint64{"read": 1}
	f.st.RouteErrors["reason\xff"] = 1
	f.top.Provider = &pgrouted.ProviderInfo{Name: "patroni", Endpoint: "http://pg\xff:8008", Leader: "east\xff", LeaderTimeline: 2}
	return f
}

// TestOddNamesNeverPanic: a scrape of a Source with names that a label, a
// terminal or a log could not show as they are does not panic, and
// exports every series, each such name through dsn.Printable: its odd
// bytes and characters as escapes.
func TestOddNamesNeverPanic(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promcollector.New(oddSource()))
	mfs, err := reg.Gather()
	if err != nil {
		t.Errorf("Gather: %v", err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				got[mf.GetName()+"/"+l.GetValue()] = true
			}
			if len(m.GetLabel()) == 0 {
				got[mf.GetName()] = true
			}
		}
	}
	for _, want := range []string{
		"pgrouted_primary_epoch", `pgrouted_healthy/east\xff`, `pgrouted_healthy/\u202etsae`, `pgrouted_healthy/we\u001b[2Jst`,
		`pgrouted_statements_total/gone\xfe`, `pgrouted_route_errors_total/reason\xff`, "pgrouted_route_errors_total/no-primary",
		"pgrouted_topology_provider_up/patroni", `pgrouted_current_primary/east\xff`,
	} {
		if !got[want] {
			t.Errorf("series %q missing from Gather's answer", want)
		}
	}
	for k := range got {
		if dsn.Printable(k) != k {
			t.Errorf("series %q exported with a label that is not printable", k)
		}
	}

	status, body := scrape(t, reg, promhttp.HandlerOpts{})
	if status != 200 || !strings.Contains(body, `pgrouted_healthy{endpoint="east\\xff"} 1`) {
		t.Errorf("scrape: status %d\n%s", status, body)
	}
}

// scrape gets reg's metrics over HTTP, as Prometheus does, served with
// opts; it returns the status and the body.
func scrape(t *testing.T, reg prometheus.Gatherer, opts promhttp.HandlerOpts) (int, string) {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, opts))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestOddNamesLive: a Connector whose hosts have names of any script
// (accented, CJK, an emoji) is scraped over HTTP, every host's series
// under its name.
func TestOddNamesLive(t *testing.T) {
	names := []string{"région 1", "東京", "🐘"}
	dsn := cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_names=r%C3%A9gion%201,%E6%9D%B1%E4%BA%AC,%F0%9F%90%98"
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	waitFor(t, 45*time.Second, "the primary known", func() bool { return conn.Topology().Primary == names[0] })
	if _, err := db.ExecContext(context.Background(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promcollector.New(conn))
	status, body := scrape(t, reg, promhttp.HandlerOpts{})
	if status != 200 {
		t.Fatalf("scrape: status %d\n%s", status, body)
	}
	for _, n := range names {
		if !strings.Contains(body, `pgrouted_healthy{endpoint="`+n+`"}`) {
			t.Errorf("no pgrouted_healthy series for %q:\n%s", n, body)
		}
	}
}
