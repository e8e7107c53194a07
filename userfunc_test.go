//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// setupFunctions creates the schema the user-function tests call: a tenant
// switch (VOLATILE, set_config), a STABLE reader of it, a function that
// takes an advisory lock, one that inserts, a VOLATILE one that only reads
// (random()), a STABLE-labelled one, and waits until the replicas have them.
func setupFunctions(t *testing.T, ctx context.Context) {
	t.Helper()
	p := cluster.Primary()
	mustExec(t, ctx, p, `
DROP SCHEMA IF EXISTS app CASCADE;
CREATE SCHEMA app;
CREATE FUNCTION app.set_tenant(t text) RETURNS text LANGUAGE sql
	AS $$ SELECT set_config('app.tenant', t, false) $$;
CREATE FUNCTION app.tenant() RETURNS text LANGUAGE sql STABLE
	AS $$ SELECT coalesce(current_setting('app.tenant', true), '') $$;
CREATE FUNCTION app.lock_it(k bigint) RETURNS void LANGUAGE plpgsql
	AS $$ BEGIN PERFORM pg_advisory_lock(k); END $$;
CREATE TABLE app.items (id bigserial PRIMARY KEY, v text NOT NULL);
CREATE FUNCTION app.add_item(v text) RETURNS bigint LANGUAGE sql
	AS $$ INSERT INTO app.items (v) VALUES (v) RETURNING id $$;
CREATE FUNCTION app.jitter() RETURNS double precision LANGUAGE sql
	AS $$ SELECT random() $$;
CREATE FUNCTION app.labelled_stable() RETURNS int LANGUAGE sql STABLE
	AS $$ SELECT 1 $$;
`)
	replicated(t, ctx)
}

// openFunctions opens a connector whose function catalog is loaded.
func openFunctions(t *testing.T, extra ...string) (*sql.DB, *pgrouted.Connector, *routes) {
	t.Helper()
	db, conn, rec := open(t, extra...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := conn.Explain(context.Background(), "SELECT app.tenant()")
		if err == nil && !d.Primary {
			return db, conn, rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("a STABLE function still does not go to a replica: %+v, %v", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTenantSwitchThroughAFunction: workers switch tenants through a
// VOLATILE SQL function on their own *sql.Conn and read the setting back,
// while fresh sessions check what they see. The function must run on the
// worker's primary session and pin it: no fresh session sees a tenant, no
// worker loses its own.
func TestTenantSwitchThroughAFunction(t *testing.T) {
	ctx := testCtx(t)
	setupFunctions(t, ctx)
	db, _, rec := openFunctions(t)
	db.SetMaxOpenConns(0)

	const workers, switches = 6, 10
	// The workers keep their connections until all are done: a connection
	// given back to database/sql's pool keeps its session's settings, with
	// any driver, and would leak them to whoever takes it next.
	var done sync.WaitGroup
	done.Add(workers)
	var (
		mu                  sync.Mutex
		leaks, lost, errors []string
	)
	fail := func(list *[]string, f string, a ...any) {
		mu.Lock()
		*list = append(*list, fmt.Sprintf(f, a...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cn, err := db.Conn(ctx)
			if err != nil {
				fail(&errors, "worker %d: %v", w, err)
				done.Done()
				return
			}
			defer cn.Close()
			defer func() { done.Done(); done.Wait() }()
			for i := 0; i < switches; i++ {
				want := fmt.Sprintf("tenant-%d-%d", w, i)
				var got string
				if err := cn.QueryRowContext(ctx, "SELECT app.set_tenant($1)", want).Scan(&got); err != nil {
					fail(&errors, "worker %d set: %v", w, err)
					return
				}
				if err := cn.QueryRowContext(ctx, "SELECT app.tenant()").Scan(&got); err != nil {
					fail(&errors, "worker %d read: %v", w, err)
					return
				}
				if got != want {
					fail(&lost, "worker %d read %q after setting %q", w, got, want)
				}
				// A fresh session, from the pool: it must see no tenant.
				var fresh string
				if err := db.QueryRowContext(ctx, "SELECT app.tenant()").Scan(&fresh); err != nil {
					fail(&errors, "fresh read: %v", err)
					return
				}
				if fresh != "" {
					fail(&leaks, "a fresh session saw %q", fresh)
				}
			}
		}()
	}
	wg.Wait()
	if len(errors) > 0 {
		t.Fatalf("%d errors, first: %s", len(errors), errors[0])
	}
	if len(leaks) > 0 || len(lost) > 0 {
		t.Errorf("%d of %d fresh reads saw another session's tenant (first: %v); %d of %d reads lost their own setting (first: %v)",
			len(leaks), workers*switches, first(leaks), len(lost), workers*switches, first(lost))
	}
	// The switch ran on the primary for the stated reason, naming the
	// function. (Where the fresh reads ran depends on how fast the replicas
	// replay: a VOLATILE function may have written, so the watermark moved
	// past it; TestStableFunctionOnReplicas covers reads on replicas.)
	sets := 0
	for _, e := range rec.snapshot() {
		if strings.Contains(e.Query, "set_tenant") {
			sets++
			if !e.Primary || e.Reason != pgrouted.ReasonVolatileFunction || e.Function != "set_tenant" {
				t.Errorf("tenant switch routed %+v, want the primary for %q naming set_tenant", e.Decision, pgrouted.ReasonVolatileFunction)
			}
		}
	}
	if sets != workers*switches {
		t.Errorf("%d tenant switches seen, want %d", sets, workers*switches)
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// TestDOBlockPins: a DO block that sets a setting runs on the primary and
// keeps the session there, so its next read sees the setting.
func TestDOBlockPins(t *testing.T) {
	ctx := testCtx(t)
	db, _, rec := open(t)
	cn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	if _, err := cn.ExecContext(ctx, `DO $$BEGIN PERFORM set_config('app.do_marker', 'kept', false); END$$`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		var got sql.NullString
		if err := cn.QueryRowContext(ctx, "SELECT current_setting('app.do_marker', true)").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got.String != "kept" {
			t.Fatalf("read %d after the DO block: %q, want kept", i, got.String)
		}
	}
	ev := rec.snapshot()
	if len(ev) == 0 || !ev[len(ev)-1].Primary || ev[len(ev)-1].Reason != pgrouted.ReasonPinned {
		t.Fatalf("the read after DO: %+v, want pinned to the primary", ev[len(ev)-1].Decision)
	}
}

// TestAdvisoryLockInsideAFunction: a lock taken inside a VOLATILE function
// is held on the primary, where it excludes others.
func TestAdvisoryLockInsideAFunction(t *testing.T) {
	ctx := testCtx(t)
	setupFunctions(t, ctx)
	db, _, _ := openFunctions(t)
	cn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	const key = 424242
	if _, err := cn.ExecContext(ctx, "SELECT app.lock_it($1)", key); err != nil {
		t.Fatal(err)
	}
	var held int
	if err := cluster.Primary().QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND granted", []any{key}, &held); err != nil {
		t.Fatal(err)
	}
	if held != 1 {
		t.Fatalf("%d advisory locks %d held on the primary, want 1", held, key)
	}
	var got bool
	if err := cluster.Primary().QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", []any{key}, &got); err != nil {
		t.Fatal(err)
	}
	if got {
		t.Fatal("another session took the advisory lock the function holds")
	}
	if _, err := cn.ExecContext(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
}

// TestWritingFunctionRunsOnce: a function that inserts, called through
// QueryContext, runs once, on the primary, and its row is read back at once.
func TestWritingFunctionRunsOnce(t *testing.T) {
	ctx := testCtx(t)
	setupFunctions(t, ctx)
	db, _, rec := openFunctions(t)
	for i := 0; i < 10; i++ {
		v := fmt.Sprintf("item-%d-%d", i, time.Now().UnixNano())
		rows, err := db.QueryContext(ctx, "SELECT app.add_item($1)", v)
		if err != nil {
			t.Fatal(err)
		}
		var id int64
		for rows.Next() {
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM app.items WHERE v = $1", v).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("the row written by the function, read back at once: %d rows, want 1", n)
		}
		var onPrimary int
		if err := cluster.Primary().QueryRow(ctx, "SELECT count(*) FROM app.items WHERE v = $1", []any{v}, &onPrimary); err != nil {
			t.Fatal(err)
		}
		if onPrimary != 1 {
			t.Fatalf("%d rows on the primary, want 1: the function ran %d times", onPrimary, onPrimary)
		}
	}
	for _, e := range rec.snapshot() {
		if strings.Contains(e.Query, "add_item") && (!e.Primary || e.Retried) {
			t.Errorf("writing function routed %+v (retried %v), want the primary at once", e.Decision, e.Retried)
		}
	}
}

// TestRefusedReadIsRemembered: a function wrongly listed as a read runs on
// a replica, which refuses it (SQLSTATE 25006); it runs once on the
// primary, its row is read back at once, the connection stays on the
// primary, and the next run of the same text goes to the primary first.
func TestRefusedReadIsRemembered(t *testing.T) {
	ctx := testCtx(t)
	setupFunctions(t, ctx)
	db, conn, rec := openFunctions(t, "pgrouted_read_functions=app.add_item")
	q := "SELECT app.add_item($1)"
	if d, err := conn.Explain(ctx, q); err != nil || d.Primary {
		t.Fatalf("a function listed as a read: %+v, %v; want a replica", d, err)
	}
	cn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	v := fmt.Sprintf("refused-%d", time.Now().UnixNano())
	var id int64
	if err := cn.QueryRowContext(ctx, q, v).Scan(&id); err != nil {
		t.Fatal(err)
	}
	ev := rec.snapshot()
	last := ev[len(ev)-1]
	if !last.Primary || !last.Retried || last.Reason != pgrouted.ReasonRetry25006 {
		t.Fatalf("first run: %+v (retried %v), want the replica's refusal, then the primary", last.Decision, last.Retried)
	}
	var n int
	if err := cluster.Primary().QueryRow(ctx, "SELECT count(*) FROM app.items WHERE v = $1", []any{v}, &n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d rows on the primary, want 1", n)
	}
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM app.items WHERE v = $1", v).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the row read back at once: %d rows, %v; want 1", n, err)
	}
	var s string
	if err := cn.QueryRowContext(ctx, "SELECT app.tenant()").Scan(&s); err != nil {
		t.Fatal(err)
	}
	ev = rec.snapshot()
	if last = ev[len(ev)-1]; !last.Primary || last.Reason != pgrouted.ReasonPinned {
		t.Fatalf("a read on the connection after the refused one: %+v, want pinned", last.Decision)
	}
	d, err := conn.Explain(ctx, q)
	if err != nil || !d.Primary || d.Reason != pgrouted.ReasonRefused {
		t.Fatalf("the same text again: %+v, %v; want the primary (%s)", d, err, pgrouted.ReasonRefused)
	}
	if err := db.QueryRowContext(ctx, q, v+"-2").Scan(&id); err != nil {
		t.Fatal(err)
	}
	ev = rec.snapshot()
	if last = ev[len(ev)-1]; !last.Primary || last.Retried || last.Reason != pgrouted.ReasonRefused {
		t.Fatalf("second run: %+v (retried %v), want the primary at once", last.Decision, last.Retried)
	}
	if st := conn.Stats(); st.FunctionRouted == 0 || st.FunctionPins == 0 {
		t.Fatalf("Stats: %d statements routed by functions, %d pins; want both counted", st.FunctionRouted, st.FunctionPins)
	}
}

// TestStableFunctionOnReplicas: a STABLE user function is a read.
func TestStableFunctionOnReplicas(t *testing.T) {
	ctx := testCtx(t)
	setupFunctions(t, ctx)
	db, _, rec := openFunctions(t)
	for i := 0; i < 20; i++ {
		var s string
		if err := db.QueryRowContext(ctx, "SELECT app.tenant()").Scan(&s); err != nil {
			t.Fatal(err)
		}
	}
	onReplica := 0
	for _, e := range rec.snapshot() {
		if strings.Contains(e.Query, "app.tenant()") && !e.Primary {
			onReplica++
		}
	}
	if onReplica < 15 {
		t.Fatalf("%d of 20 calls of a STABLE function ran on a replica, want most", onReplica)
	}
}

// TestFunctionKeys: pgrouted_read_functions lets a VOLATILE function that
// only reads run on a replica; pgrouted_write_functions sends a function to
// the primary whatever its label.
func TestFunctionKeys(t *testing.T) {
	ctx := testCtx(t)
	setupFunctions(t, ctx)
	for _, tt := range []struct {
		extra   string
		query   string
		primary bool
		reason  pgrouted.Reason
	}{
		{"", "SELECT app.jitter()", true, pgrouted.ReasonVolatileFunction},
		{"pgrouted_read_functions=app.jitter", "SELECT app.jitter()", false, pgrouted.ReasonReplica},
		{"", "SELECT app.labelled_stable()", false, pgrouted.ReasonReplica},
		{"pgrouted_write_functions=app.labelled_stable", "SELECT app.labelled_stable()", true, pgrouted.ReasonWriteFunction},
	} {
		db, conn, _ := openFunctions(t, tt.extra)
		d, err := conn.Explain(ctx, tt.query)
		if err != nil {
			t.Fatal(err)
		}
		if d.Primary != tt.primary || d.Reason != tt.reason {
			t.Errorf("%s with %q: %+v, want primary=%v reason %q", tt.query, tt.extra, d, tt.primary, tt.reason)
		}
		if _, err := db.ExecContext(ctx, tt.query); err != nil {
			t.Errorf("%s with %q: %v", tt.query, tt.extra, err)
		}
	}
}

// TestNewFunctionsNeverReachAReplica: a function created by another process
// is unknown to the connector's catalog: it runs on the primary from the
// first call, even a STABLE one, until the catalog knows it. One created
// through the driver is known soon after.
func TestNewFunctionsNeverReachAReplica(t *testing.T) {
	ctx := testCtx(t)
	setupFunctions(t, ctx)
	db, conn, rec := openFunctions(t)
	// Ten functions created while the connector read its catalog at no
	// time between their CREATE and their call. A read that ended
	// meanwhile (the one a change of primary asks for at start can come
	// that late on a busy machine, or the 30 s one) may know the
	// function: that one is not counted, and another is created.
	var unknown []string
	for i := 0; len(unknown) < 10; i++ {
		if i == 30 {
			t.Fatalf("of %d functions created, only %d saw no catalog read between their CREATE and their call", i, len(unknown))
		}
		reads := conn.Stats().CatalogReads
		name := fmt.Sprintf("app.fresh_%d_%d", i, time.Now().UnixNano())
		mustExec(t, ctx, cluster.Primary(), fmt.Sprintf("CREATE FUNCTION %s() RETURNS int LANGUAGE sql STABLE AS $$ SELECT 1 $$", name))
		replicated(t, ctx)
		q := fmt.Sprintf("SELECT %s()", name)
		d, err := conn.Explain(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
		if conn.Stats().CatalogReads != reads {
			continue
		}
		if !d.Primary || d.Reason != pgrouted.ReasonUnknownFunction {
			t.Fatalf("a function created a moment ago by another process: %+v, want the primary (%s)", d, pgrouted.ReasonUnknownFunction)
		}
		unknown = append(unknown, name)
	}
	for _, name := range unknown {
		calls := 0
		for _, e := range rec.snapshot() {
			if strings.Contains(e.Query, name+"()") {
				calls++
				if !e.Primary {
					t.Errorf("%q ran on %s", e.Query, e.Endpoint)
				}
			}
		}
		if calls == 0 {
			t.Errorf("no route event for the call of %s", name)
		}
	}

	// Created through the driver: the catalog is read again after the DDL.
	if _, err := db.ExecContext(ctx, "CREATE FUNCTION app.via_driver() RETURNS int LANGUAGE sql STABLE AS $$ SELECT 2 $$"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := conn.Explain(ctx, "SELECT app.via_driver()")
		if err != nil {
			t.Fatal(err)
		}
		if !d.Primary {
			break
		}
		if d.Reason != pgrouted.ReasonUnknownFunction && d.Reason != pgrouted.ReasonPositionUnknown && d.Reason != pgrouted.ReasonBehind {
			t.Fatalf("a STABLE function created through the driver: %+v", d)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a STABLE function created through the driver still runs on the primary after 20s: %+v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClassificationFollowsTheCatalog: a text classified while its function
// was STABLE is judged again once the catalog knows the function became
// VOLATILE. Classifications are remembered by text (classcache.go), each
// under the catalog snapshot it was made with: a verdict made under an
// older snapshot is never reused.
func TestClassificationFollowsTheCatalog(t *testing.T) {
	ctx := testCtx(t)
	setupFunctions(t, ctx)
	db, conn, _ := openFunctions(t)
	const q = "SELECT app.tenant()"
	// Remembered as a read, on a replica.
	for range 3 {
		if d, err := conn.Explain(ctx, q); err != nil || d.Primary {
			t.Fatalf("a STABLE function: %+v, %v; want a replica", d, err)
		}
	}
	if _, err := db.ExecContext(ctx, "ALTER FUNCTION app.tenant() VOLATILE"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := conn.Explain(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if d.Primary && d.Reason == pgrouted.ReasonVolatileFunction {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after ALTER FUNCTION … VOLATILE through the driver, the same text is still %+v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
