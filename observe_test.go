//go:build unix

package pgrouted_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted"
)

func TestTopologyAndStats(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "CREATE TABLE IF NOT EXISTS obs (id int)")
	replicated(t, ctx)
	// Trust authentication ignores the password: it is here to be hidden.
	dsn := strings.Replace(cluster.DSN(), "postgres@", "postgres:hunter2secret@", 1) +
		"&pgrouted_probe_interval=100ms&pgrouted_names=" + names()
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
	waitReplicaRoute(t, conn)
	for i := 0; i < 10; i++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO obs VALUES ($1)", i); err != nil {
			t.Fatal(err)
		}
	}
	waitReplicaRoute(t, conn)
	for i := 0; i < 20; i++ {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM obs").Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	db.ExecContext(pgrouted.WithRoute(ctx, pgrouted.Replica), "DELETE FROM obs")

	// Every standby is checked below: wait until each answered a probe
	// (waitReplicaRoute returns once one is eligible; on a loaded machine
	// node1's first probe was still out after 1.7 s).
	replicasReady(t, conn)
	top := conn.Topology()
	if top.Primary != "node0" || top.Epoch != 1 || top.LeaseRemaining <= 0 || len(top.Hosts) != 3 {
		t.Fatalf("topology: %+v", top)
	}
	for _, h := range top.Hosts {
		want := "standby"
		if h.Name == "node0" {
			want = "primary"
		}
		if h.Role != want || !h.Healthy || h.Circuit != "closed" || h.RTT <= 0 || h.Address == "" {
			t.Errorf("host %+v", h)
		}
		if want == "standby" && (h.ReplayLSN == "" || h.ByteLag == nil || h.LagBound == nil) {
			t.Errorf("standby without positions: %+v", h)
		}
	}
	rec := httptest.NewRecorder()
	conn.TopologyHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/topology", nil))
	body, _ := io.ReadAll(rec.Body)
	var back pgrouted.Snapshot
	if err := json.Unmarshal(body, &back); err != nil || back.Primary != "node0" {
		t.Fatalf("handler: %v %s", err, body)
	}
	for _, key := range []string{`"leaseRemaining"`, `"conflictingPrimaries"`, `"rtt"`, `"inflightReads"`, `"byteLag"`, `"lagBound"`, `"circuit"`, `"maxLifetimeDestroyCount"`} {
		if !strings.Contains(string(body), key) {
			t.Errorf("topology JSON lacks %s", key)
		}
	}
	st := conn.Stats()
	js, _ := json.Marshal(st)
	for _, out := range []string{string(body), string(js), fmt.Sprint(cfg), fmt.Sprintf("%+v", top)} {
		if strings.Contains(out, "hunter2secret") {
			t.Fatalf("password in %s", out)
		}
	}
	if st.Statements["node0"]["write"] < 10 {
		t.Errorf("stats: %s", js)
	}
	if st.Statements["node1"]["read"]+st.Statements["node2"]["read"] < 20 {
		t.Errorf("stats: %s", js)
	}
	if st.RouteErrors[pgrouted.ReasonWriteOnReplica] != 1 {
		t.Errorf("stats: %s", js)
	}
	t.Logf("stats: %s", js)
}
