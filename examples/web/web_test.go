package web_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/examples/web"
	"github.com/pgrouted/pgrouted/testcluster"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{
		Replicas: 2,
		Logf:     func(f string, a ...any) { fmt.Fprintf(os.Stderr, "testcluster: "+f+"\n", a...) },
	}, func(c *testcluster.Cluster) { cluster = c })
}

// TestWriteError: each sentinel, wrapped as pgrouted returns it and once
// more by the application, gets its answer.
func TestWriteError(t *testing.T) {
	for _, tc := range []struct {
		err        error
		code       int
		retryAfter string
	}{
		{&pgrouted.RouteError{Op: pgrouted.OpWrite, Reason: pgrouted.ReasonNoPrimary}, http.StatusServiceUnavailable, "2"},
		{&pgrouted.RouteError{Op: pgrouted.OpRead, Reason: pgrouted.ReasonBehind}, http.StatusServiceUnavailable, "1"},
		{&pgrouted.RouteError{Op: pgrouted.OpWrite, Reason: pgrouted.ReasonPrimaryLost}, http.StatusGatewayTimeout, ""},
		{errors.New("syntax error"), http.StatusInternalServerError, ""},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("create note: %w", tc.err)} {
			rec := httptest.NewRecorder()
			web.WriteError(rec, err)
			if rec.Code != tc.code || rec.Header().Get("Retry-After") != tc.retryAfter {
				t.Errorf("%v: %d, Retry-After %q; want %d, %q", err, rec.Code, rec.Header().Get("Retry-After"), tc.code, tc.retryAfter)
			}
		}
	}
}

// TestSessionAcrossInstances: two instances of an application, each with
// its own Connector, behind one load balancer. A user's write goes through
// the first, the read that follows through the second, which has written
// nothing itself: the Session in the cookie makes the second read the
// write, from a replica that waited for it (pgrouted_replica_wait) while
// replication is delayed by 50 ms. Without the cookie, the second instance
// would read from a replica at once, before the write arrived there, and
// find nothing: the test would fail.
func TestSessionAcrossInstances(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Latency(50 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		defer r.ReplicationFault().Heal()
	}
	dsn := cluster.DSN() + "&pgrouted_probe_interval=50ms&pgrouted_replica_wait=500ms&pgrouted_names=node0,node1,node2"
	open := func(onRoute func(pgrouted.RouteEvent)) *sql.DB {
		cfg, err := pgrouted.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.OnRoute = onRoute
		c, err := pgrouted.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(c)
		t.Cleanup(func() { db.Close() })
		return db
	}
	var mu sync.Mutex
	var reads, onReplica int
	a := open(nil)
	b := open(func(e pgrouted.RouteEvent) {
		if e.Op == pgrouted.OpRead && e.Err == nil {
			mu.Lock()
			reads++
			if !e.Primary {
				onReplica++
			}
			mu.Unlock()
		}
	})
	if _, err := a.ExecContext(ctx, `DROP TABLE IF EXISTS notes; CREATE TABLE notes (id bigserial PRIMARY KEY, body text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	// Both replicas have the table before the first request.
	lsn, err := cluster.Primary().CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range cluster.Replicas() {
		if err := r.WaitReplayed(ctx, lsn); err != nil {
			t.Fatal(err)
		}
	}

	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := web.LoadSession(r)
		var id int64
		body, _ := io.ReadAll(r.Body)
		err := a.QueryRowContext(pgrouted.WithSession(r.Context(), s),
			`INSERT INTO notes (body) VALUES ($1) RETURNING id`, string(body)).Scan(&id)
		if err != nil {
			web.WriteError(w, err)
			return
		}
		if err := web.SaveSession(w, s); err != nil {
			web.WriteError(w, err)
			return
		}
		fmt.Fprint(w, id)
	})
	show := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := web.LoadSession(r)
		var body string
		err := b.QueryRowContext(pgrouted.WithSession(r.Context(), s),
			`SELECT body FROM notes WHERE id = $1`, r.URL.Query().Get("id")).Scan(&body)
		if errors.Is(err, sql.ErrNoRows) {
			http.NotFound(w, r)
			return
		}
		if err != nil {
			web.WriteError(w, err)
			return
		}
		fmt.Fprint(w, body)
	})
	srvA, srvB := httptest.NewServer(create), httptest.NewServer(show)
	defer srvA.Close()
	defer srvB.Close()

	const n = 40
	var cookies []*http.Cookie
	for i := range n {
		want := fmt.Sprintf("note %d", i)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srvA.URL, strings.NewReader(want))
		for _, c := range cookies {
			req.AddCookie(c)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST: %d %s", resp.StatusCode, id)
		}
		cookies = resp.Cookies()
		if len(cookies) != 1 || cookies[0].Name != web.SessionCookie || cookies[0].Value == "" {
			t.Fatalf("POST set cookies %v", cookies)
		}
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, srvB.URL+"?id="+string(id), nil)
		req.AddCookie(cookies[0])
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(got) != want {
			t.Fatalf("GET on the other instance right after the write: %d %q, want %q", resp.StatusCode, got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d reads on the second instance, %d served by a replica", reads, onReplica)
	if reads != n {
		t.Errorf("%d reads, want %d", reads, n)
	}
	if onReplica == 0 {
		t.Error("no read-back was served by a replica: the test shows nothing about the Session")
	}
}
