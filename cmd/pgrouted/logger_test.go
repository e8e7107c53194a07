//go:build unix

package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// TestLoggerOneLinePerTopologyEvent checks what is asked of
// Config.Logger: one structured line for each topology event (host down and
// up, circuit opened and closed, primary changed) and none per statement.
// It goes through the demo's slog handler, so it checks that too.
func TestLoggerOneLinePerTopologyEvent(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	log := newEventLog(nil)
	cfg, err := pgrouted.ParseConfig(testDSN("pgrouted_lease=5s"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = log.logger()
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	lines := func() []Event {
		var out []Event
		for _, e := range log.all() {
			if e.Source == "pgrouted" {
				out = append(out, e)
			}
		}
		return out
	}
	waitLines := func(what string, ok func([]Event) bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second) // generous: a busy machine times probes out
		for !ok(lines()) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s in the log:\n%s", what, dump(lines()))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Boot: every host up, node0 primary.
	waitLines("boot lines", func(ls []Event) bool {
		return count(ls, "pgrouted: topology", "host-up", "") == 3 && count(ls, "pgrouted: topology", "primary-changed", "node0") == 1
	})
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS logt (id int)"); err != nil {
		t.Fatal(err)
	}
	// The Session's reads below do not carry the connector's watermark:
	// every replica must hold the table first.
	if err := cluster.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	before := len(lines())

	// Statements of every kind: not one line.
	sess := pgrouted.NewSession()
	for i := 0; i < 50; i++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO logt VALUES ($1)", i); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRowContext(pgrouted.WithSession(ctx, sess), "SELECT count(*) FROM logt").Scan(&n); err != nil {
			t.Fatal(err)
		}
		tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM logt").Scan(&n); err != nil {
			t.Fatal(err)
		}
		tx.Commit()
		db.ExecContext(pgrouted.WithRoute(ctx, pgrouted.Replica), "DELETE FROM logt") // a route error
	}
	// None per statement. (A probe that times out on a busy machine, or a
	// late boot probe, is a topology event, and may log its line
	// meanwhile.)
	if ls := lines(); len(ls) > before+4 {
		t.Fatalf("%d lines logged for 200 statements:\n%s", len(ls)-before, dump(ls[before:]))
	} else {
		for _, e := range ls[before:] {
			if !strings.HasPrefix(e.Message, "pgrouted: topology") && !strings.HasPrefix(e.Message, "pgrouted: circuit") {
				t.Fatalf("a line that is not a topology event:\n%s", dump(ls[before:]))
			}
		}
	}
	before = len(lines())

	// A replica killed and started again: down, circuit open; up, circuit
	// closed; once each.
	node2 := cluster.Node(2)
	if err := node2.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	// Count from here: on a busy machine a boot probe may time out too.
	waitLines("node2 down and its circuit open", func(ls []Event) bool {
		ls = ls[before:]
		return count(ls, "pgrouted: topology", "host-down", "node2") == 1 && count(ls, "pgrouted: circuit open", "", "node2") == 1
	})
	time.Sleep(2 * time.Second) // failed probes go on: a window for lines that must not come
	if err := node2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitLines("node2 up and its circuit closed", func(ls []Event) bool {
		ls = ls[before:]
		return count(ls, "pgrouted: topology", "host-up", "node2") == 1 && count(ls, "pgrouted: circuit closed", "", "node2") == 1
	})
	time.Sleep(time.Second) // a window for a repeated line, which must not come
	// Four lines for node2, one each; lines for the other hosts only if
	// their probes timed out on a busy machine meanwhile (topology and
	// circuit events too).
	// A probe of the restarted node2 that times out on a busy machine is
	// one more change (down, then up again), logged once too: each line
	// about node2 differs from the one before it about node2, and every
	// down has its up, every open its close.
	ls := lines()[before:]
	var aboutNode2 []Event
	for _, e := range ls {
		switch {
		case e.Attrs["host"] == "node2":
			if n := len(aboutNode2); n > 0 && key(aboutNode2[n-1]) == key(e) {
				t.Errorf("the same line about node2 twice in a row: %s", e)
			}
			aboutNode2 = append(aboutNode2, e)
		case !strings.HasPrefix(e.Message, "pgrouted: topology") && !strings.HasPrefix(e.Message, "pgrouted: circuit"):
			t.Errorf("a line that is not a topology event: %s", e)
		}
	}
	down, up := count(aboutNode2, "pgrouted: topology", "host-down", "node2"), count(aboutNode2, "pgrouted: topology", "host-up", "node2")
	opened, closed := count(aboutNode2, "pgrouted: circuit open", "", "node2"), count(aboutNode2, "pgrouted: circuit closed", "", "node2")
	if down < 1 || down != up || opened < 1 || opened != closed || down+up+opened+closed != len(aboutNode2) {
		t.Errorf("want node2's crash and restart logged as down, circuit open, up, circuit closed (a probe timing out later may add a down and an up): %d down, %d up, %d open, %d closed in %d lines:\n%s",
			down, up, opened, closed, len(aboutNode2), dump(ls))
	}
	before = len(lines())

	// A failover: the old primary down, a new primary with its predecessor.
	if err := cluster.Node(0).Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Node(1).Promote(ctx); err != nil {
		t.Fatal(err)
	}
	waitLines("the new primary", func(ls []Event) bool {
		for _, e := range ls {
			if e.Attrs["event"] == "primary-changed" && e.Attrs["host"] == "node1" && e.Attrs["previous"] == "node0" && e.Attrs["epoch"] == "2" {
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second) // a window for a repeated line, which must not come
	ls = lines()
	for i := 1; i < len(ls); i++ {
		if key(ls[i]) == key(ls[i-1]) {
			t.Errorf("the same line twice in a row: %s", ls[i])
		}
	}
	if count(ls[before:], "pgrouted: topology", "host-down", "node0") != 1 {
		t.Errorf("node0's stop not logged once:\n%s", dump(ls))
	}
	for _, e := range ls {
		if e.Level != "INFO" && e.Level != "WARN" {
			t.Errorf("level %s: %s", e.Level, e)
		}
	}
	t.Logf("the whole log:\n%s", dump(ls))
}

// count counts the lines with message msg, attribute event (if not empty)
// and attribute host (if not empty).
func count(ls []Event, msg, event, host string) int {
	n := 0
	for _, e := range ls {
		if e.Message == msg && (event == "" || e.Attrs["event"] == event) && (host == "" || e.Attrs["host"] == host) {
			n++
		}
	}
	return n
}

func key(e Event) string {
	return fmt.Sprint(e.Message, e.Attrs["event"], e.Attrs["host"], e.Attrs["epoch"])
}

func dump(ls []Event) string {
	var b strings.Builder
	for _, e := range ls {
		b.WriteString("  " + e.String() + "\n")
	}
	return b.String()
}

// TestEventHandler: attributes, groups and levels reach the event log.
func TestEventHandler(t *testing.T) {
	log := newEventLog(nil)
	l := log.logger().With("conn", 7).WithGroup("g")
	l.Debug("not kept")
	l.Info("hello", "host", "node1", "n", 2)
	l.Warn("careful")
	ev := log.all()
	if len(ev) != 2 {
		t.Fatalf("%d events: %v", len(ev), ev)
	}
	if ev[0].Attrs["conn"] != "7" || ev[0].Attrs["g.host"] != "node1" || ev[0].Attrs["g.n"] != "2" || ev[0].Level != "INFO" {
		t.Fatalf("%+v", ev[0])
	}
	if !strings.Contains(ev[0].String(), "hello") || !strings.Contains(ev[0].String(), "g.host=node1") {
		t.Fatalf("%s", ev[0])
	}
	if ev[1].Level != "WARN" || ev[1].Attrs["conn"] != "7" {
		t.Fatalf("%+v", ev[1])
	}
	_ = context.Background()
}
