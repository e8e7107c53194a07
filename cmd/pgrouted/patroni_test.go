//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted"
)

// TestTopologyCommandPatroni: with pgrouted_topology=patroni, `pgrouted
// topology` prints the provider (the endpoint that answered, the leader it
// names, its timeline) and the JSON carries it; the Patroni endpoint's
// password shows nowhere.
func TestTopologyCommandPatroni(t *testing.T) {
	ctx := testCtx(t)
	const secret = "patroniS3cretPW"
	var members []map[string]any
	for i, n := range cluster.Nodes() {
		host, port, err := net.SplitHostPort(n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		role, state := "replica", "streaming"
		if n == cluster.Primary() {
			role, state = "leader", "running"
		}
		members = append(members, map[string]any{"name": fmt.Sprintf("pg%d", i), "role": role, "state": state, "host": host, "port": p, "timeline": 1})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pw, ok := r.BasicAuth(); !ok || pw != secret || r.URL.Path != "/cluster" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"members": members})
	}))
	defer srv.Close()
	endpoint := strings.Replace(srv.URL, "http://", "http://patroni:"+secret+"@", 1)
	dsn := testDSN("pgrouted_topology=patroni", "pgrouted_patroni_endpoints="+url.QueryEscape(endpoint))

	withDSN(t, dsn)
	code, out, errs := runCmd(t, ctx, "topology")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	want := "provider: patroni via " + strings.Replace(srv.URL, "http://", "http://patroni:xxxxx@", 1) + " (leader node0, timeline 1, lease "
	if !strings.Contains(out, want) || !strings.Contains(out, "primary: node0") {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	code, js, errs := runCmd(t, ctx, "topology", "--json")
	var top pgrouted.Snapshot
	if code != exitOK || json.Unmarshal([]byte(js), &top) != nil {
		t.Fatalf("exit %d, %q %s", code, js, errs)
	}
	if top.Provider == nil || top.Provider.Name != "patroni" || top.Provider.Leader != "node0" || top.Provider.LeaderTimeline != 1 || top.Hosts[0].Member != "pg0" {
		t.Fatalf("snapshot provider %+v, host 0 %+v", top.Provider, top.Hosts[0])
	}
	for _, s := range []string{out, errs, js} {
		if strings.Contains(s, secret) || strings.Contains(s, marker) {
			t.Fatalf("a password shows:\n%s", s)
		}
	}
}
