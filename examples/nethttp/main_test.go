package main

import (
	"database/sql"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/examples/internal/clustertest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// instance serves Handler on a *sql.DB of its own (its own Connector, as a
// second process would have), reads waiting up to 200ms on a replica.
func instance(t *testing.T) (*httptest.Server, *sql.DB, *pgrouted.Connector, *clustertest.Recorder) {
	t.Helper()
	cfg, err := pgrouted.ParseConfig(clustertest.DSN("pgrouted_replica_wait=200ms"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &clustertest.Recorder{}
	cfg.OnRoute = rec.Record
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	srv := httptest.NewServer(Handler(db))
	t.Cleanup(srv.Close)
	return srv, db, conn, rec
}

// TestTwoInstances: a user writes a note through instance A and reads it
// at once through instance B, with the cookie A set: B reads it, from a
// replica that holds it (or the primary), never missing it. Without the
// cookie, B's reads miss notes that the replicas have not replayed yet.
func TestTwoInstances(t *testing.T) {
	defer clustertest.Guard(t)
	ctx := clustertest.Ctx(t)
	clustertest.Reset(t)
	a, dbA, connA, _ := instance(t)
	b, _, connB, recB := instance(t)
	if err := Migrate(ctx, dbA); err != nil {
		t.Fatal(err)
	}
	if err := clustertest.Cluster.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitReplicaRoute(t, connA)
	clustertest.WaitReplicaRoute(t, connB)

	// writeThenRead posts a note to A and reads it from B at once.
	writeThenRead := func(c *http.Client, text string) (status int, body string) {
		t.Helper()
		resp, err := c.PostForm(a.URL+"/notes", url.Values{"text": {text}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/notes/") {
			t.Fatalf("POST /notes: %s, Location %q", resp.Status, loc)
		}
		resp, err = c.Get(b.URL + loc)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(got))
	}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	user := &http.Client{Jar: jar, CheckRedirect: noRedirect}
	mark := recB.Mark()
	for i := range 50 {
		text := "note " + string(rune('a'+i%26))
		status, got := writeThenRead(user, text)
		clustertest.Fresh(t, status == http.StatusOK && got == text, "note %d through B: %d %q, want %q", i, status, got, text)
	}
	onReplica, reads := clustertest.Share(recB.Since(mark))
	t.Logf("with the cookie: B read %d notes, %d on replicas", reads, onReplica)
	if onReplica == 0 {
		t.Errorf("with the cookie, replicas served none of B's %d reads", reads)
	}

	// Without the cookie, B has no position to wait for: it reads until
	// it misses a note (a read that reaches a replica before the write
	// does: a slower machine misses less often), 200 notes at most.
	anonymous := &http.Client{CheckRedirect: noRedirect}
	missed, notes := 0, 0
	for missed == 0 && notes < 200 {
		notes++
		if status, _ := writeThenRead(anonymous, "anonymous"); status == http.StatusNotFound {
			missed++
		}
	}
	t.Logf("without the cookie: B missed %d of %d notes", missed, notes)
	if missed == 0 {
		t.Errorf("without the cookie, B missed none of %d notes: the test cannot tell what the cookie does", notes)
	}
}
