package otelroute_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/otelroute"
	"github.com/pgrouted/pgrouted/testcluster"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// nodeByPort maps inet_server_port() (PostgreSQL's own port) to a node.
func nodeByPort(t *testing.T, port int) *testcluster.Node {
	t.Helper()
	for _, n := range cluster.Nodes() {
		if strings.HasSuffix(n.DirectAddr(), fmt.Sprintf(":%d", port)) {
			return n
		}
	}
	t.Fatalf("no node on port %d", port)
	return nil
}

// traced runs query (which returns inet_server_port()) inside a span of
// kind, and returns the node that ran it, the span, and the statement's
// span the hook started under it (nil when it started none).
func traced(t *testing.T, ctx context.Context, tel *telemetry, db *sql.DB, kind trace.SpanKind, query string) (*testcluster.Node, sdktrace.ReadOnlySpan, sdktrace.ReadOnlySpan) {
	t.Helper()
	ctx, parent := tel.tp.Tracer("test").Start(ctx, t.Name(), trace.WithSpanKind(kind))
	var port int
	err := db.QueryRowContext(ctx, query).Scan(&port)
	parent.End()
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	var outer, child sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		switch {
		case s.SpanContext().SpanID() == parent.SpanContext().SpanID():
			outer = s
		case s.Parent().SpanID() == parent.SpanContext().SpanID():
			if child != nil {
				t.Fatalf("%s: two spans under the caller's: %s and %s", query, child.Name(), s.Name())
			}
			child = s
		}
	}
	if outer == nil {
		t.Fatalf("%s: the caller's span was not recorded", query)
	}
	return nodeByPort(t, port), outer, child
}

// wantRoute checks that span says n ran the statement, in role, for reason.
func wantRoute(t *testing.T, span sdktrace.ReadOnlySpan, n *testcluster.Node, role string, reason pgrouted.Reason, retried bool) {
	t.Helper()
	if span == nil {
		t.Fatal("no statement span")
	}
	got := map[attribute.Key]attribute.Value{}
	for _, kv := range span.Attributes() {
		got[kv.Key] = kv.Value
	}
	want := map[attribute.Key]any{
		"db.system.name":    "postgresql",
		"server.address":    "127.0.0.1",
		"server.port":       int64(n.Port()),
		"db.namespace":      "postgres",
		"pgrouted.endpoint": n.Name(),
		"pgrouted.role":     role,
		"pgrouted.reason":   string(reason),
		"pgrouted.retried":  retried,
	}
	for k, w := range want {
		v, ok := got[k]
		if !ok || v.AsInterface() != w {
			t.Errorf("span %q: %s = %v, want %v (all: %v)", span.Name(), k, v.AsInterface(), w, span.Attributes())
		}
	}
}

// noMarker checks that no recorded span holds the DSN's password.
func noMarker(t *testing.T, tel *telemetry) {
	t.Helper()
	for _, s := range tel.spans.Ended() {
		if strings.Contains(fmt.Sprint(s.Name(), s.Attributes(), s.Status(), s.Events()), marker) {
			t.Errorf("span %q holds the password", s.Name())
		}
	}
}

// TestSpans: reads served by a replica, a write, a read that fell back to
// the primary because the replicas were behind, and a read retried on
// another replica after its replica died each leave on their span the
// server that ran them (checked against inet_server_port()) and why.
func TestSpans(t *testing.T) {
	ctx := testCtx(t)
	if err := cluster.Primary().Exec(ctx, "CREATE TABLE IF NOT EXISTS otel_t (id bigserial PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("replica read", func(t *testing.T) {
		tel := newTelemetry(t)
		db, _ := open(t, tel, nil, nil)
		n, outer, span := traced(t, ctx, tel, db, trace.SpanKindInternal, "SELECT inet_server_port()")
		if n == cluster.Primary() {
			t.Fatalf("the read ran on the primary %s", n.Name())
		}
		wantRoute(t, span, n, otelroute.RoleReplica, pgrouted.ReasonReplica, false)
		if span.SpanKind() != trace.SpanKindClient || span.Name() != "SELECT" || span.Status().Code == codes.Error {
			t.Errorf("statement span %q kind %v status %v, want a CLIENT span \"SELECT\" (its db.query.summary) without error", span.Name(), span.SpanKind(), span.Status())
		}
		if m := attrsOf(span); m["db.operation.name"] != "SELECT" || m["db.query.summary"] != "SELECT" {
			t.Errorf("statement span's db.operation.name %v, db.query.summary %v; want SELECT, SELECT", m["db.operation.name"], m["db.query.summary"])
		}
		if !span.StartTime().Before(span.EndTime()) || span.StartTime().Before(outer.StartTime()) || span.EndTime().After(outer.EndTime()) {
			t.Errorf("statement span from %v to %v, outside the caller's (%v to %v)", span.StartTime(), span.EndTime(), outer.StartTime(), outer.EndTime())
		}
		noMarker(t, tel)
	})

	t.Run("write", func(t *testing.T) {
		tel := newTelemetry(t)
		db, _ := open(t, tel, nil, nil)
		n, _, span := traced(t, ctx, tel, db, trace.SpanKindInternal, "INSERT INTO otel_t (v) VALUES ('w') RETURNING inet_server_port()")
		if n != cluster.Primary() {
			t.Fatalf("the write ran on %s", n.Name())
		}
		wantRoute(t, span, n, otelroute.RolePrimary, pgrouted.ReasonWrite, false)
		noMarker(t, tel)
	})

	t.Run("behind", func(t *testing.T) {
		restore(t)
		tel := newTelemetry(t)
		db, _ := open(t, tel, nil, nil)
		for _, r := range cluster.Replicas() {
			if err := r.PauseReplay(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO otel_t (v) VALUES ('b')"); err != nil {
			t.Fatal(err)
		}
		// A read of the table written: it needs the write.
		n, _, span := traced(t, ctx, tel, db, trace.SpanKindInternal, "SELECT inet_server_port() FROM otel_t LIMIT 1")
		if n != cluster.Primary() {
			t.Fatalf("the read after a write the paused replicas lack ran on %s", n.Name())
		}
		wantRoute(t, span, n, otelroute.RolePrimary, pgrouted.ReasonBehind, false)
		for _, r := range cluster.Replicas() {
			if err := r.ResumeReplay(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("replica died", func(t *testing.T) {
		// Probes an hour apart: the killed replica stays eligible in the
		// Connector's eyes until a read fails on it, and Select sends
		// every read there while it is.
		restore(t)
		victim := cluster.Replicas()[1]
		tel := newTelemetry(t)
		db, conn := open(t, tel, func(cfg *pgrouted.Config) {
			cfg.Select = func(_ context.Context, cs []pgrouted.Candidate) string { return victim.Name() }
		}, nil, "pgrouted_probe_interval=60m", "pgrouted_lease=120m", "pgrouted_max_lag=none")
		reg, err := otelroute.RegisterMetrics(conn, otelroute.WithMeterProvider(tel.mp))
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Unregister()
		// Until both replicas answered their first probe, reads go to
		// whichever did; and the other one must be eligible for the
		// retry (with probes an hour apart, one whose first probe is
		// late stays out).
		deadline := time.Now().Add(45 * time.Second)
		for {
			n, _, _ := traced(t, ctx, tel, db, trace.SpanKindInternal, "SELECT inet_server_port()")
			if n == victim && standbysProbed(conn) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("reads go to %s, not to %s, 45s after opening", n.Name(), victim.Name())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := victim.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		n, _, span := traced(t, ctx, tel, db, trace.SpanKindInternal, "SELECT inet_server_port()")
		if n == victim || n == cluster.Primary() {
			t.Fatalf("the read after %s died ran on %s, want the other replica", victim.Name(), n.Name())
		}
		wantRoute(t, span, n, otelroute.RoleReplica, pgrouted.ReasonReplica, true)
		noMarker(t, tel)
		// The metric counts it as Stats do.
		got := collect(t, tel).sums(t, "pgrouted.replica_retries")[""]
		if st := conn.Stats().ReplicaRetries; got != st || st != 1 {
			t.Errorf("pgrouted.replica_retries = %d, Stats.ReplicaRetries = %d, want 1 and 1", got, st)
		}
	})

	t.Run("wrapped", func(t *testing.T) {
		// A database/sql wrapper's span for the statement is a CLIENT span:
		// the hook adds to it and starts none.
		tel := newTelemetry(t)
		db, _ := open(t, tel, nil, nil)
		n, outer, span := traced(t, ctx, tel, db, trace.SpanKindClient, "SELECT inet_server_port()")
		if span != nil {
			t.Fatalf("a span %q under the wrapper's", span.Name())
		}
		wantRoute(t, outer, n, otelroute.RoleReplica, pgrouted.ReasonReplica, false)
	})
}

// TestSpanError: a statement that fails leaves its SQLSTATE on its span
// (error.type and db.response.status_code) and an error status; one that
// cannot be routed says why, with no server.
func TestSpanError(t *testing.T) {
	ctx := testCtx(t)
	tel := newTelemetry(t)
	db, _ := open(t, tel, nil, []otelroute.Option{otelroute.WithQueryText()})
	tr := tel.tp.Tracer("test")

	c1, p1 := tr.Start(ctx, "bad")
	_, err := db.ExecContext(c1, "SELECT * FROM no_such_table_otel")
	p1.End()
	if err == nil {
		t.Fatal("a read of a missing table succeeded")
	}
	c2, p2 := tr.Start(ctx, "forced")
	_, err = db.ExecContext(pgrouted.WithRoute(c2, pgrouted.Replica), "INSERT INTO otel_t (v) VALUES ('no')")
	p2.End()
	if err == nil {
		t.Fatal("a write forced to a replica ran")
	}
	attrs := func(parent trace.Span) (sdktrace.ReadOnlySpan, map[string]any) {
		for _, s := range tel.spans.Ended() {
			if s.Parent().SpanID() == parent.SpanContext().SpanID() {
				m := map[string]any{}
				for _, kv := range s.Attributes() {
					m[string(kv.Key)] = kv.Value.AsInterface()
				}
				return s, m
			}
		}
		t.Fatalf("no statement span under %v", parent.SpanContext().SpanID())
		return nil, nil
	}
	s, m := attrs(p1)
	if s.Status().Code != codes.Error || m["error.type"] != "42P01" || m["db.response.status_code"] != "42P01" || m["db.query.text"] != "SELECT * FROM no_such_table_otel" || m["server.port"] == nil {
		t.Errorf("failed statement: status %v, attributes %v", s.Status(), m)
	}
	s, m = attrs(p2)
	if s.Status().Code != codes.Error || m["pgrouted.reason"] != string(pgrouted.ReasonWriteOnReplica) || m["error.type"] != "*pgrouted.RouteError" || m["server.address"] != nil || m["pgrouted.role"] != nil {
		t.Errorf("unroutable statement: status %v, attributes %v", s.Status(), m)
	}
	if got := slices.Collect(func(yield func(string) bool) {
		for _, s := range tel.spans.Ended() {
			if !yield(s.Name()) {
				return
			}
		}
	}); len(got) != 4 {
		t.Errorf("spans %v, want the two callers' and one per statement", got)
	}
	noMarker(t, tel)
}

// standbysProbed reports whether every host but the primary answered a
// probe as a standby, with its replay position.
func standbysProbed(conn *pgrouted.Connector) bool {
	top := conn.Topology()
	for _, h := range top.Hosts {
		if h.Name != top.Primary && (h.Role != "standby" || !h.Healthy || h.ReplayLSN == "") {
			return false
		}
	}
	return top.Primary != ""
}

// attrsOf returns span's attributes by key.
func attrsOf(span sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range span.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// TestSpanOpenWhileQueryRuns: the statement's span is started before the
// statement is sent, is open while the server runs it (here: while it
// waits for an advisory lock another session holds) and while its rows
// are open, and ends when they are closed, with the server's attributes
// beside the semantic conventions' (db.operation.name, db.query.summary,
// set at its start).
func TestSpanOpenWhileQueryRuns(t *testing.T) {
	ctx := testCtx(t)
	tel := newTelemetry(t)
	db, _ := open(t, tel, nil, []otelroute.Option{otelroute.WithSpans(otelroute.SpanPerStatement), otelroute.WithQueryText()})

	// Another session holds the lock: the statement below waits on the
	// primary until it lets go. (An advisory lock: a table's would also
	// hold up pgrouted's reads of the catalog.)
	holder, err := pgx.Connect(ctx, cluster.DSNOf(cluster.Primary()))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock(50008)"); err != nil {
		t.Fatal(err)
	}
	const q = "SELECT pg_advisory_xact_lock(50008), g, inet_server_port() FROM generate_series(1, 3) g -- otel open span"
	type result struct {
		rows *sql.Rows
		err  error
	}
	done := make(chan result, 1)
	go func() {
		rows, err := db.QueryContext(ctx, q)
		done <- result{rows, err}
	}()
	// Wait until the server runs it: it waits for the lock.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := holder.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query = $1 AND wait_event_type = 'Lock'", q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the statement is not waiting for the lock on the primary 30s after it was issued")
		}
		select {
		case r := <-done:
			t.Fatalf("the statement returned while the lock was held: %v", r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	mine := func(s sdktrace.ReadOnlySpan) bool { return attrsOf(s)["db.query.text"] == q }
	ended := func() sdktrace.ReadOnlySpan {
		for _, s := range tel.spans.Ended() {
			if mine(s) {
				return s
			}
		}
		return nil
	}
	var span sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Started() {
		if mine(s) {
			span = s
		}
	}
	if span == nil || ended() != nil {
		t.Fatalf("no open span of the statement while the server runs it: started %v, ended %v", spanNames(tel.spans.Started()), ended() != nil)
	}
	if m := attrsOf(span); span.Name() != "SELECT" || span.SpanKind() != trace.SpanKindClient || m["db.system.name"] != "postgresql" || m["db.operation.name"] != "SELECT" ||
		m["db.query.summary"] != "SELECT" || m["db.namespace"] != "postgres" {
		t.Errorf("the open span %q (%v) at its start: %v", span.Name(), span.SpanKind(), m)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock(50008)"); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if ended() != nil {
		t.Fatal("the span ended before the statement's rows were closed")
	}
	for r.rows.Next() {
	}
	if err := r.rows.Close(); err != nil {
		t.Fatal(err)
	}
	s := ended()
	if s == nil {
		t.Fatal("the span did not end when the rows were closed")
	}
	if m := attrsOf(s); m["server.port"] != int64(cluster.Primary().Port()) || m["pgrouted.endpoint"] != cluster.Primary().Name() || m["pgrouted.role"] != otelroute.RolePrimary {
		t.Errorf("the ended span's route: %v", m)
	}
	noMarker(t, tel)
}

func spanNames(spans []sdktrace.ReadWriteSpan) []string {
	var ns []string
	for _, s := range spans {
		ns = append(ns, s.Name())
	}
	return ns
}
