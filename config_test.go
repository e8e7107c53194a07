//go:build unix

package pgrouted_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/topology"
)

// TestConfigCloneKeepsHooks: Config.Clone copies the hooks a DSN cannot
// carry (the embedded dsn.Config's Clone drops them), deeply copies the
// parsed DSN, and the Pool's Config is such a clone.
func TestConfigCloneKeepsHooks(t *testing.T) {
	cfg, err := pgrouted.ParseConfig(cluster.DSN())
	if err != nil {
		t.Fatal(err)
	}
	routed := 0
	cfg.OnRoute = func(pgrouted.RouteEvent) { routed++ }
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Select = func(context.Context, []pgrouted.Candidate) string { return "" }
	cfg.Provider = topology.NewManual()
	check := func(what string, cp *pgrouted.Config) {
		t.Helper()
		if cp.OnRoute == nil || cp.Logger != cfg.Logger || cp.Select == nil || cp.Provider != cfg.Provider {
			t.Fatalf("%s lost a hook: OnRoute %v, Logger %v, Select %v, Provider %v", what, cp.OnRoute != nil, cp.Logger == cfg.Logger, cp.Select != nil, cp.Provider == cfg.Provider)
		}
		before := routed
		cp.OnRoute(pgrouted.RouteEvent{})
		if routed != before+1 {
			t.Fatalf("%s: OnRoute is not the configured one", what)
		}
	}
	cp := cfg.Clone()
	check("Clone", cp)
	cp.Hosts[0].Name = "changed"
	if cfg.Hosts[0].Name == "changed" {
		t.Fatal("Clone shares the hosts with the original")
	}
	if (*pgrouted.Config)(nil).Clone() != nil {
		t.Fatal("a nil Config clones to a Config")
	}

	cfg.Provider = nil // a Pool on the DSN's probes
	pool, err := pgrouted.NewPoolWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	got := pool.Config()
	cfg.Provider = got.Provider
	check("Pool.Config", got)
}
