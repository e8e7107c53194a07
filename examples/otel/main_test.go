package main

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/examples/internal/clustertest"
	"github.com/pgrouted/pgrouted/otelroute"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// openTraced opens the example's way (wrapped by otelsql or not) with an
// in-memory pipeline and a recorder, and waits until reads go to the
// replicas.
func openTraced(t *testing.T, wrapped bool) (*sql.DB, *pgrouted.Connector, *telemetry, *clustertest.Recorder) {
	t.Helper()
	tel := newTelemetry()
	t.Cleanup(tel.shutdown)
	rec := &clustertest.Recorder{}
	db, conn, reg, err := open(clustertest.DSN(), wrapped, tel, rec.Record)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		reg.Unregister()
		db.Close()
	})
	clustertest.WaitReplicaRoute(t, conn)
	return db, conn, tel, rec
}

// statement is one statement the test ran in its request: its text and
// the node that really ran it (inet_server_port()).
type statement struct {
	query, node string
}

// traceRequest writes a row and reads it back (a freshness check), then,
// once the driver would send a read to a replica, reads it three more times, all in one
// request span; every statement returns inet_server_port().
func traceRequest(t *testing.T, db *sql.DB, conn *pgrouted.Connector, tel *telemetry) (trace.Span, []statement) {
	t.Helper()
	ctx := clustertest.Ctx(t)
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS otel_items (id bigserial PRIMARY KEY, v text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	ctx, span := tel.Tracer.Tracer("test").Start(ctx, "request")
	defer span.End()
	var done []statement
	one := func(query string, args []any, dest ...any) {
		t.Helper()
		var port int
		if err := db.QueryRowContext(ctx, query, args...).Scan(append(dest, &port)...); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		done = append(done, statement{query, clustertest.NodeByPort(t, port)})
	}
	var id int64
	one("INSERT INTO otel_items (v) VALUES ('traced') RETURNING id, inet_server_port()", nil, &id)
	var v string
	one("SELECT v, inet_server_port() FROM otel_items WHERE id = $1", []any{id}, &v)
	clustertest.Fresh(t, v == "traced", "read back %q, want %q", v, "traced")
	// Once the driver's probes have seen the replicas hold the row,
	// three reads, then, should the route have changed meanwhile, reads
	// until one runs on a replica.
	clustertest.WaitReplicaRoute(t, conn)
	for range 3 {
		one("SELECT v, inet_server_port() FROM otel_items WHERE id = $1", []any{id}, &v)
	}
	if !clustertest.IsReplica(done[len(done)-1].node) {
		clustertest.UntilReplica(t, "a read of the traced row", func() (string, bool) {
			one("SELECT v, inet_server_port() FROM otel_items WHERE id = $1", []any{id}, &v)
			return done[len(done)-1].node, true
		})
	}
	return span, done
}

// routed returns the spans that carry pgrouted's attributes, in the order
// they ended.
func routed(tel *telemetry) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.Spans.Ended() {
		if a := attribute.NewSet(s.Attributes()...); a.HasValue(otelroute.AttrEndpoint) {
			out = append(out, s)
		}
	}
	return out
}

// wantServers checks that the i-th span names the node that ran the i-th
// statement, its address and port, and a role and reason that agree.
func wantServers(t *testing.T, spans []sdktrace.ReadOnlySpan, done []statement) {
	t.Helper()
	if len(spans) != len(done) {
		t.Fatalf("%d spans with a route, want one per statement (%d)", len(spans), len(done))
	}
	onReplica := 0
	for i, s := range spans {
		a := attribute.NewSet(s.Attributes()...)
		get := func(k attribute.Key) attribute.Value { v, _ := a.Value(k); return v }
		var node = done[i].node
		var port int
		for _, n := range clustertest.Cluster.Nodes() {
			if n.Name() == node {
				port = n.Port()
			}
		}
		primary := node == clustertest.Cluster.Primary().Name()
		role, reason := get(otelroute.AttrRole).AsString(), get(otelroute.AttrReason).AsString()
		if get(otelroute.AttrEndpoint).AsString() != node || get("server.address").AsString() != "127.0.0.1" ||
			get("server.port").AsInt64() != int64(port) || get("db.system.name").AsString() != "postgresql" ||
			(role == otelroute.RolePrimary) != primary {
			t.Errorf("%s ran on %s (port %d); its span %q says %v", done[i].query, node, port, s.Name(), s.Attributes())
		}
		if !primary {
			onReplica++
			if r := pgrouted.Reason(reason); r != pgrouted.ReasonReplica && r != pgrouted.ReasonCheck {
				t.Errorf("%s on replica %s: reason %q", done[i].query, node, reason)
			}
		}
	}
	if onReplica == 0 {
		t.Error("no read ran on a replica, even once the replicas held the row")
	}
}

// TestWithoutWrapper: without a database/sql wrapper, otelroute starts a
// CLIENT span per statement, named by its db.query.summary, under the
// request's span, that names the server that ran it.
func TestWithoutWrapper(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, tel, _ := openTraced(t, false)
	request, done := traceRequest(t, db, conn, tel)
	var spans []sdktrace.ReadOnlySpan
	for _, s := range routed(tel) {
		summary := ""
		for _, kv := range s.Attributes() {
			if kv.Key == "db.query.summary" {
				summary = kv.Value.AsString()
			}
		}
		if s.InstrumentationScope().Name != otelroute.ScopeName || summary == "" || s.Name() != summary || s.SpanKind() != trace.SpanKindClient {
			t.Errorf("span %q (%v, scope %s, summary %q), want otelroute's CLIENT spans named by their db.query.summary", s.Name(), s.SpanKind(), s.InstrumentationScope().Name, summary)
		}
		// The CREATE TABLE ran before the request, under no span.
		if s.Parent().SpanID() == request.SpanContext().SpanID() {
			spans = append(spans, s)
		}
	}
	wantServers(t, spans, done)
	wantStatementsMetric(t, tel, conn)
}

// TestWithOtelsql: with otelsql wrapping the database, otelsql's own span
// for each statement gets the route, and otelroute starts no span.
func TestWithOtelsql(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, tel, _ := openTraced(t, true)
	_, done := traceRequest(t, db, conn, tel)
	var queries []sdktrace.ReadOnlySpan
	for _, s := range tel.Spans.Ended() {
		if s.InstrumentationScope().Name == otelroute.ScopeName {
			t.Errorf("otelroute started a span of its own under otelsql: %v", s.Attributes())
		}
	}
	for _, s := range routed(tel) {
		if !strings.HasPrefix(s.Name(), "sql.") || s.SpanKind() != trace.SpanKindClient {
			t.Errorf("route on span %q (%v), want otelsql's", s.Name(), s.SpanKind())
		}
		if s.Name() != "sql.conn.exec" { // the CREATE TABLE ran before the request
			queries = append(queries, s)
		}
	}
	wantServers(t, queries, done)
	wantStatementsMetric(t, tel, conn)
}

// wantStatementsMetric checks pgrouted.statements against Stats.
func wantStatementsMetric(t *testing.T, tel *telemetry, conn *pgrouted.Connector) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.Reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	st := conn.Stats()
	seen := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "pgrouted.statements" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				ep, _ := dp.Attributes.Value(otelroute.AttrEndpoint)
				op, _ := dp.Attributes.Value(otelroute.AttrOp)
				if want := st.Statements[ep.AsString()][op.AsString()]; uint64(dp.Value) != want {
					t.Errorf("pgrouted.statements{%s,%s} = %d, Stats say %d", ep.AsString(), op.AsString(), dp.Value, want)
				}
				seen++
			}
		}
	}
	if seen == 0 {
		t.Error("no pgrouted.statements collected")
	}
}

func TestProgram(t *testing.T) {
	defer clustertest.Guard(t)
	for _, wrapped := range []bool{false, true} {
		clustertest.Reset(t)
		var out bytes.Buffer
		if err := run(clustertest.Ctx(t), clustertest.DSN(), wrapped, &out); err != nil {
			t.Fatal(err)
		}
		t.Log(out.String())
		want := []string{
			`read back "hello"`,
			"span INSERT greetings: node0 (127.0.0.1:", // named by its db.query.summary
			"metric pgrouted.statements{node0,write} = 2",
		}
		if wrapped {
			want[1] = "span sql.conn.query: node0 (127.0.0.1:"
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("wrapped %v: output lacks %q", wrapped, w)
			}
		}
	}
}
