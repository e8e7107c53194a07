//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

type stepKey struct{}

// TestOnRouteSeesContext: every RouteEvent carries the context of the call
// that caused it, on each path that reports one: a replica read, a write, a
// read that fell back to the primary, a statement the replica refused with
// 25006 and that ran again on the primary, a prepared statement, BEGIN, a
// statement in a transaction, COMMIT and ROLLBACK (which take the context
// of BeginTx), and a statement that could not be routed.
func TestOnRouteSeesContext(t *testing.T) {
	base := testCtx(t)
	mustExec(t, base, cluster.Primary(), `
CREATE TABLE IF NOT EXISTS routectx (id bigserial PRIMARY KEY, v text);
CREATE OR REPLACE FUNCTION routectx_add(v text) RETURNS bigint LANGUAGE sql
	AS $$ INSERT INTO routectx (v) VALUES (v) RETURNING id $$;`)
	replicated(t, base)

	var (
		mu   sync.Mutex
		seen []string // "step query"
		evs  = map[string]pgrouted.RouteEvent{}
		bad  []string
	)
	dsn := cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_lease=5s&pgrouted_write_timeout=20s&pgrouted_names=" + names() +
		"&pgrouted_read_functions=public.routectx_add"
	db, conn, _ := openDSN(t, dsn, func(cfg *pgrouted.Config) {
		cfg.OnRoute = func(e pgrouted.RouteEvent) {
			mu.Lock()
			defer mu.Unlock()
			if e.Context == nil {
				bad = append(bad, fmt.Sprintf("%q: nil Context", e.Query))
				return
			}
			step, _ := e.Context.Value(stepKey{}).(string)
			if step == "" {
				bad = append(bad, fmt.Sprintf("%q (%+v): a context without the caller's value", e.Query, e.Decision))
				return
			}
			seen = append(seen, step+" "+e.Query)
			evs[step] = e // the last of the step
		}
	})
	// toReplica waits until the refused step's statement would go to a
	// replica: the function catalog must know routectx_add (a listed read
	// function goes to a replica, which refuses it), and a replica must
	// hold the connector's writes, as its last probe shows.
	toReplica := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			d, err := conn.Explain(base, "SELECT routectx_add('x')")
			if err == nil && !d.Primary && d.Reason == pgrouted.ReasonReplica {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("routectx_add listed as a read still goes to %+v, %v after 30s", d, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	toReplica()

	at := func(step string) context.Context { return context.WithValue(base, stepKey{}, step) }
	var n int64
	if err := db.QueryRowContext(at("read"), "SELECT 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(at("write"), "INSERT INTO routectx (v) VALUES ('w')"); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(pgrouted.WithMaxLag(at("fallback"), 0), "SELECT 2").Scan(&n); err != nil {
		t.Fatal(err)
	}
	// The write step's row reaches the replicas asynchronously; until one
	// has replayed it, a read of this connector rightly goes to the
	// primary (behind), and the next step would not test a refusal.
	toReplica()
	cn, err := db.Conn(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := cn.QueryRowContext(at("refused"), "SELECT routectx_add('r')").Scan(&n); err != nil {
		t.Fatal(err)
	}
	cn.Close()
	st, err := db.PrepareContext(base, "SELECT $1::int")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.QueryRowContext(at("prepared"), 3).Scan(&n); err != nil {
		t.Fatal(err)
	}
	st.Close()
	tx, err := db.BeginTx(at("tx"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(at("in-tx"), "INSERT INTO routectx (v) VALUES ('t')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tx, err = db.BeginTx(at("ro-tx"), &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRowContext(at("in-ro-tx"), "SELECT 4").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(pgrouted.WithRoute(at("unroutable"), pgrouted.Replica), "INSERT INTO routectx (v) VALUES ('no') RETURNING id").Scan(&n); err == nil {
		t.Fatal("a write forced to a replica ran")
	}

	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	want := []string{
		"read SELECT 1",
		"write INSERT INTO routectx (v) VALUES ('w')",
		"fallback SELECT 2",
		"refused SELECT routectx_add('r')",
		"prepared SELECT $1::int",
		"tx BEGIN",
		"in-tx INSERT INTO routectx (v) VALUES ('t')",
		"tx COMMIT",
		"ro-tx BEGIN",
		"in-ro-tx SELECT 4",
		"ro-tx ROLLBACK",
		"unroutable INSERT INTO routectx (v) VALUES ('no') RETURNING id",
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events (step, query):\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	// The paths the steps were meant to take.
	for step, ok := range map[string]bool{
		"read":       !evs["read"].Primary,
		"fallback":   evs["fallback"].Primary && evs["fallback"].Reason == pgrouted.ReasonBehind,
		"refused":    evs["refused"].Primary && evs["refused"].Retried && evs["refused"].Reason == pgrouted.ReasonRetry25006,
		"in-tx":      evs["in-tx"].Primary && evs["in-tx"].Reason == pgrouted.ReasonInTx,
		"unroutable": errors.Is(evs["unroutable"].Err, pgrouted.ErrWriteOnReplica),
	} {
		if !ok {
			t.Errorf("%s: %+v (retried %v, err %v): not the path this step tests", step, evs[step].Decision, evs[step].Retried, evs[step].Err)
		}
	}
}
