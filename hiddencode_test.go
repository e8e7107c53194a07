//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// hiddenSetup is user code that statements run without calling it by name.
// Every leaky object ends up calling hid.leak_*, VOLATILE plpgsql that sets
// hid.leak for the session; every safe twin is the same shape with
// IMMUTABLE code.
const hiddenSetup = `
-- (PostgreSQL 14 and later: hiddenAtomic.)
DROP SCHEMA IF EXISTS hid CASCADE;
CREATE SCHEMA hid;
CREATE TABLE hid.t (x int);
INSERT INTO hid.t VALUES (1), (2), (3);
CREATE FUNCTION hid.leak(x int) RETURNS int LANGUAGE plpgsql
	AS $$ BEGIN PERFORM set_config('hid.leak', 'leaked', false); RETURN x; END $$;
CREATE FUNCTION hid.leak2(s int, x int) RETURNS int LANGUAGE plpgsql
	AS $$ BEGIN PERFORM set_config('hid.leak', 'leaked', false); RETURN coalesce(s, 0) + x; END $$;
CREATE FUNCTION hid.plus(s int, x int) RETURNS int LANGUAGE sql IMMUTABLE
	AS $$ SELECT coalesce(s, 0) + x $$;
CREATE FUNCTION hid.positive(v int) RETURNS boolean LANGUAGE plpgsql
	AS $$ BEGIN PERFORM set_config('hid.leak', 'leaked', false); RETURN v > 0; END $$;

-- An aggregate whose transition function is VOLATILE; its twin's is IMMUTABLE.
CREATE AGGREGATE hid.leaky_sum(int) (sfunc = hid.leak2, stype = int);
CREATE AGGREGATE hid.safe_sum(int) (sfunc = hid.plus, stype = int);

-- Attribute notation: r.hid_leaky_attr calls hid_leaky_attr(r), which
-- must be on the search_path (DROP SCHEMA hid drops it with hid.t).
CREATE FUNCTION public.hid_leaky_attr(r hid.t) RETURNS int LANGUAGE plpgsql
	AS $$ BEGIN PERFORM set_config('hid.leak', 'leaked', false); RETURN r.x; END $$;
CREATE FUNCTION public.hid_safe_attr(r hid.t) RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT r.x $$;

-- Operators.
CREATE OPERATOR hid.##@ (leftarg = int, rightarg = int, function = hid.leak2);
CREATE OPERATOR hid.##+ (leftarg = int, rightarg = int, function = hid.plus);

-- Domains: a CHECK that calls a VOLATILE function, one nested in another,
-- one whose CHECK uses the leaky operator; the twins check VALUE > 0.
CREATE DOMAIN hid.leaky_dom AS int CHECK (hid.positive(VALUE));
CREATE DOMAIN hid.nested_dom AS hid.leaky_dom;
CREATE DOMAIN hid.op_dom AS int CHECK ((VALUE OPERATOR(hid.##@) 1) > 0);
CREATE DOMAIN hid.safe_dom AS int CHECK (VALUE > 0);
CREATE DOMAIN hid.safe_nested_dom AS hid.safe_dom;

-- Casts WITH FUNCTION.
CREATE TYPE hid.pair AS (v int);
CREATE TYPE hid.safe_pair AS (v int);
CREATE FUNCTION hid.to_pair(i int) RETURNS hid.pair LANGUAGE plpgsql
	AS $$ BEGIN PERFORM set_config('hid.leak', 'leaked', false); RETURN ROW(i)::hid.pair; END $$;
CREATE FUNCTION hid.to_safe_pair(i int) RETURNS hid.safe_pair LANGUAGE sql IMMUTABLE
	AS $$ SELECT ROW(i)::hid.safe_pair $$;
CREATE CAST (int AS hid.pair) WITH FUNCTION hid.to_pair(int);
CREATE CAST (int AS hid.safe_pair) WITH FUNCTION hid.to_safe_pair(int);

-- Views: one calling a VOLATILE user function, one calling set_config
-- itself, one over a leaky view; the twins read plain tables.
CREATE VIEW hid.leaky_view AS SELECT hid.leak(x) AS m FROM hid.t;
CREATE VIEW hid.config_view AS SELECT x AS m, set_config('hid.leak', 'leaked', false) AS s FROM hid.t;
CREATE VIEW hid.view_of_leaky AS SELECT m FROM hid.leaky_view;
CREATE VIEW hid.safe_view AS SELECT x AS m FROM hid.t;
CREATE VIEW hid.view_of_safe AS SELECT m FROM hid.safe_view;


-- Row-level security: a policy that calls VOLATILE code.
CREATE TABLE hid.rls (x int);
INSERT INTO hid.rls VALUES (1);
ALTER TABLE hid.rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY leaky ON hid.rls USING (hid.positive(x));
CREATE TABLE hid.safe_rls (x int);
ALTER TABLE hid.safe_rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY safe ON hid.safe_rls USING (x > 0);
`

// hiddenCase is a statement that runs hidden code, and its safe twin.
type hiddenCase struct{ name, leaky, safe string }

// hiddenAtomic is the part of hiddenSetup for PostgreSQL 14 and later:
// SQL-standard bodies, labelled IMMUTABLE, one calling VOLATILE code.
const hiddenAtomic = `
CREATE FUNCTION hid.atomic_leak() RETURNS int LANGUAGE sql IMMUTABLE
	BEGIN ATOMIC SELECT hid.leak2(0, 1); END;
CREATE FUNCTION hid.atomic_safe() RETURNS int LANGUAGE sql IMMUTABLE
	BEGIN ATOMIC SELECT hid.plus(0, 1); END;
`

// hiddenCases are statements that run hidden code, each with its safe
// twin. Two would not leak on a replica whatever the routing: the planner
// runs nothing of the EXPLAIN's, and the policy is not applied to the
// superuser the tests connect as; their routing is checked all the same.
var hiddenCases = []hiddenCase{
	{"aggregate", "SELECT hid.leaky_sum(x) FROM hid.t", "SELECT hid.safe_sum(x) FROM hid.t"},
	{"attribute notation", "SELECT r.hid_leaky_attr FROM hid.t r", "SELECT r.hid_safe_attr FROM hid.t r"},
	{"operator", "SELECT 1 OPERATOR(hid.##@) 2", "SELECT 1 OPERATOR(hid.##+) 2"},
	{"domain check", "SELECT 5::hid.leaky_dom", "SELECT 5::hid.safe_dom"},
	{"nested domain", "SELECT CAST(5 AS hid.nested_dom)", "SELECT CAST(5 AS hid.safe_nested_dom)"},
	{"operator in a domain check", "SELECT 5::hid.op_dom", "SELECT 5::hid.safe_dom"},
	{"cast", "SELECT (5::hid.pair).v", "SELECT (5::hid.safe_pair).v"},
	{"view", "SELECT m FROM hid.leaky_view", "SELECT m FROM hid.safe_view"},
	{"view calling set_config", "SELECT m FROM hid.config_view", "SELECT m FROM hid.safe_view"},
	{"view over a view", "SELECT m FROM hid.view_of_leaky", "SELECT m FROM hid.view_of_safe"},
	{"aggregate over a view", "SELECT hid.safe_sum(m) FROM hid.leaky_view", "SELECT hid.safe_sum(m) FROM hid.safe_view"},
	{"SQL-standard body", "SELECT hid.atomic_leak()", "SELECT hid.atomic_safe()"},
	{"EXPLAIN", "EXPLAIN SELECT hid.leaky_sum(x) FROM hid.t", "EXPLAIN SELECT hid.safe_sum(x) FROM hid.t"},
	{"row-level security", "SELECT x FROM hid.rls", "SELECT x FROM hid.safe_rls"},
}

// setupHidden creates hiddenSetup (and hiddenAtomic where the server has
// SQL-standard bodies; dropped when the test ends), waits for the
// replicas, and returns the cases of hiddenCases the server can run.
func setupHidden(t *testing.T, ctx context.Context) []hiddenCase {
	t.Helper()
	p := cluster.Primary()
	mustExec(t, ctx, p, hiddenSetup)
	cases := hiddenCases
	if cluster.Major() >= 14 {
		mustExec(t, ctx, p, hiddenAtomic)
	} else {
		cases = slices.DeleteFunc(slices.Clone(cases), func(c hiddenCase) bool { return strings.Contains(c.leaky, "atomic") })
		t.Logf("PostgreSQL %d has no SQL-standard bodies: %d cases of %d", cluster.Major(), len(cases), len(hiddenCases))
	}
	t.Cleanup(func() {
		if err := p.Exec(context.Background(), "DROP SCHEMA IF EXISTS hid CASCADE"); err != nil {
			t.Errorf("drop schema hid: %v", err)
		}
	})
	replicated(t, ctx)
	return cases
}

// leakCheck is what a session sees of hid.leak.
const leakCheck = "SELECT coalesce(current_setting('hid.leak', true), '')"

// countLeaks reads leakCheck n times, forced to the replicas, and returns
// how many reads saw the setting. A read no replica can serve yet (the
// statement before it may have written, as far as the router knows, and
// the replicas have not replayed that) is tried again, for up to a minute.
func countLeaks(t *testing.T, ctx context.Context, read func(ctx context.Context) (string, error), n int) int {
	t.Helper()
	leaks := 0
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < n; i++ {
		got, err := read(pgrouted.WithRoute(ctx, pgrouted.Replica))
		if errors.Is(err, pgrouted.ErrNoReplica) && time.Now().Before(deadline) {
			i--
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("leak check, read %d of %d: %v", i+1, n, err)
		}
		if got != "" {
			leaks++
		}
	}
	return leaks
}

// TestHiddenCode: a statement that runs user code its text does not show
// as a call (an aggregate's transition function, attribute notation, an
// operator, a domain's CHECK, a cast, a view, a SQL-standard body, a
// row-level security policy, nested in each other) runs on the primary and
// pins the connection (reason hidden-code, naming the object), through the
// driver and through a Pool; other users' reads on the replicas' pooled
// connections (one per replica, so a leak would be seen by every later
// read there) never see what it set. Its safe twin runs on a replica.
func TestHiddenCode(t *testing.T) {
	ctx := testCtx(t)
	cases := setupHidden(t, ctx)
	db, conn, rec := open(t, "pgrouted_replica_max_conns=1")
	waitCatalogKnows(t, conn, "SELECT 5::hid.safe_dom")

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := conn.Explain(ctx, c.leaky)
			if err != nil || !d.Primary || (d.Reason != pgrouted.ReasonHiddenCode && d.Reason != pgrouted.ReasonVolatileFunction) {
				t.Errorf("Explain(%q): %+v, %v; want the primary for %s", c.leaky, d, err, pgrouted.ReasonHiddenCode)
			}
			d, err = conn.Explain(ctx, c.safe)
			if err != nil || d.Primary {
				t.Errorf("Explain(%q): %+v, %v; want a replica", c.safe, d, err)
			}
			// Through the driver: each run on a connection of its own,
			// which the statement pins; then other users' reads.
			for i := 0; i < 4; i++ {
				cn, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := readAll(ctx, cn, c.leaky); err != nil {
					t.Fatal(err)
				}
				// Its session keeps what it set: not back to the pool.
				_ = cn.Raw(func(any) error { return driver.ErrBadConn })
				cn.Close()
			}
			if n := countLeaks(t, ctx, func(ctx context.Context) (string, error) { return readAll(ctx, db, leakCheck) }, 20); n > 0 {
				t.Errorf("driver: %d of 20 replica reads by other users saw hid.leak set by %q", n, c.leaky)
			}
			// The leaky statements ran on the primary as writes may:
			// the twin's read needs the replicas to have replayed what
			// they wrote, which a loaded machine delays ("behind").
			waitReplicaRoute(t, conn)
			before := len(rec.snapshot())
			if _, err := readAll(ctx, db, c.safe); err != nil {
				t.Fatal(err)
			}
			if ev := rec.snapshot()[before:]; len(ev) != 1 || ev[0].Primary {
				t.Errorf("the safe twin %q ran %+v, want one read on a replica", c.safe, ev)
			}
		})
	}

	p, _ := openPool(t, nil, "pgrouted_replica_max_conns=1")
	waitCatalogKnows(t, p.Connector(), "SELECT 5::hid.safe_dom")
	for _, c := range cases {
		for i := 0; i < 4; i++ {
			rows, err := p.Query(ctx, c.leaky)
			if err != nil {
				t.Fatalf("Pool.Query(%q): %v", c.leaky, err)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				t.Fatalf("Pool.Query(%q): %v", c.leaky, err)
			}
		}
		n := countLeaks(t, ctx, func(ctx context.Context) (string, error) {
			var got string
			err := p.QueryRow(ctx, leakCheck).Scan(&got)
			return got, err
		}, 20)
		if n > 0 {
			t.Errorf("Pool, %s: %d of 20 replica reads saw hid.leak set by %q", c.name, n, c.leaky)
		}
	}
}

// waitCatalogKnows waits until conn's catalog snapshot sends query, a read
// of objects created just before, to a replica.
func waitCatalogKnows(t *testing.T, conn *pgrouted.Connector, query string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		d, err := conn.Explain(context.Background(), query)
		if err == nil && !d.Primary {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still goes to the primary after 60 s: %+v, %v", query, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCatalogChangeReachesRouting: a function another process alters from
// IMMUTABLE to VOLATILE, and a view it replaces with one that calls it,
// reach routing through the catalog's fingerprint, checked every probe
// interval: the periodic reload is set an hour apart, so only the
// fingerprint can tell.
func TestCatalogChangeReachesRouting(t *testing.T) {
	ctx := testCtx(t)
	t.Cleanup(pgrouted.SetCatalogInterval(time.Hour))
	p := cluster.Primary()
	mustExec(t, ctx, p, `
DROP SCHEMA IF EXISTS hidchg CASCADE;
CREATE SCHEMA hidchg;
CREATE FUNCTION hidchg.f(x int) RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT x $$;
CREATE VIEW hidchg.v AS SELECT 1 AS m;
`)
	t.Cleanup(func() { _ = p.Exec(context.Background(), "DROP SCHEMA IF EXISTS hidchg CASCADE") })
	replicated(t, ctx)
	_, conn, _ := open(t)
	waitCatalogKnows(t, conn, "SELECT hidchg.f(1)")
	waitCatalogKnows(t, conn, "SELECT m FROM hidchg.v")
	reads := conn.Stats().CatalogReads

	// Not through the connector: no DDL of its own asks for a reload.
	mustExec(t, ctx, p, `ALTER FUNCTION hidchg.f(int) VOLATILE`)
	waitRouted(t, conn, "SELECT hidchg.f(1)", pgrouted.ReasonVolatileFunction)
	mustExec(t, ctx, p, `ALTER FUNCTION hidchg.f(int) IMMUTABLE;
CREATE OR REPLACE VIEW hidchg.v AS SELECT hidchg.f(1) AS m;
ALTER FUNCTION hidchg.f(int) VOLATILE`)
	waitRouted(t, conn, "SELECT m FROM hidchg.v", pgrouted.ReasonHiddenCode)
	if got := conn.Stats().CatalogReads; got < reads+2 {
		t.Errorf("%d catalog reads after two changes, want at least %d", got, reads+2)
	}
}

// waitRouted waits until query goes to the primary for reason.
func waitRouted(t *testing.T, conn *pgrouted.Connector, query string, reason pgrouted.Reason) {
	t.Helper()
	// Far less than the hour of the periodic reload; many probe intervals
	// (100 ms) on a loaded machine.
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := conn.Explain(context.Background(), query)
		if err == nil && d.Primary && d.Reason == reason {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q: %+v, %v after 30 s; want the primary for %s", query, d, err, reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHiddenCodeAfterOwnChange: right after the connector's own catalog
// change (a view replaced, through it, by one that calls a VOLATILE
// function), and before the snapshot read after it is in, a read of the
// view is not judged by the snapshot from before, which knows a safe
// view: it waits for the new snapshot, which sends it to the primary for
// hidden code, or, when none comes in time (the loads are held in the
// first round), it is taken for hidden code all the same. Other users'
// replica reads never see what it set. Through the driver and a Pool.
func TestHiddenCodeAfterOwnChange(t *testing.T) {
	forEachClient(t, testHiddenCodeAfterOwnChange)
}

func testHiddenCodeAfterOwnChange(t *testing.T, open opener) {
	ctx := testCtx(t)
	restore(t)
	p := cluster.Primary()
	mustExec(t, ctx, p, `DROP SCHEMA IF EXISTS hidown CASCADE; CREATE SCHEMA hidown;
CREATE FUNCTION hidown.leak(x int) RETURNS int LANGUAGE plpgsql
	AS $$ BEGIN PERFORM set_config('hidown.leak', 'leaked', false); RETURN x; END $$`)
	t.Cleanup(func() { _ = p.Exec(context.Background(), "DROP SCHEMA IF EXISTS hidown CASCADE") })
	db, conn, rec := open(t, "pgrouted_replica_max_conns=1")
	const read = "SELECT m FROM hidown.v"
	for _, held := range []bool{true, false} {
		// A safe view, made elsewhere: the snapshot learns it from the
		// catalog's fingerprint.
		mustExec(t, ctx, p, "CREATE OR REPLACE VIEW hidown.v AS SELECT 1 AS m")
		replicated(t, ctx)
		waitCatalogKnows(t, conn, read)
		release := func() {}
		if held {
			release = pgrouted.HoldCatalogLoads(conn)
		}
		if err := db.ExecContext(ctx, "CREATE OR REPLACE VIEW hidown.v AS SELECT hidown.leak(1) AS m"); err != nil {
			release()
			t.Fatal(err)
		}
		var m int
		err := db.QueryRowContext(ctx, read).Scan(&m)
		release()
		if err != nil || m != 1 {
			t.Fatalf("held %v: %s: %d, %v", held, read, m, err)
		}
		if ev := lastEvent(t, rec, read); !ev.Primary || ev.Reason != pgrouted.ReasonHiddenCode {
			t.Errorf("held %v: %s right after the view was replaced through the connector ran on %s (%s), want the primary for %s",
				held, read, ev.Endpoint, ev.Reason, pgrouted.ReasonHiddenCode)
		}
		n := countLeaks(t, ctx, func(ctx context.Context) (string, error) {
			var got string
			err := db.QueryRowContext(ctx, "SELECT coalesce(current_setting('hidown.leak', true), '')").Scan(&got)
			return got, err
		}, 20)
		if n > 0 {
			t.Errorf("held %v: %d of 20 replica reads by other users saw hidown.leak set by the read of the view", held, n)
		}
	}
}
