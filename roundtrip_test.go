//go:build unix

package pgrouted_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// wire counts the round trips of the connections dialled to the addresses
// addrs (to any, with addrs nil), leaving out the topology's probe
// connections: a round trip starts each time the client writes after it
// has read. It also counts their Parse messages (frontendMessages).
type wire struct {
	addrs map[string]bool
	mu    sync.Mutex
	conns []*countedConn
}

type countedConn struct {
	net.Conn
	w      *wire
	addr   string
	probe  bool // its startup message names the probe's application
	read   bool // the last operation was a read
	writes int  // bursts of writes that followed a read: round trips
	msgs   frontendMessages
}

// frontendMessages reads the messages a client sends, from the bytes it
// writes, and counts its Parse messages: every one, and those that name a
// prepared statement (not the unnamed one); and every message by type. The
// connections are not encrypted (the test cluster's DSNs have
// sslmode=disable).
type frontendMessages struct {
	buf     []byte
	started bool // the startup message (untyped) was read
	parses  int
	named   int
	types   [256]int
}

func (f *frontendMessages) feed(b []byte) {
	f.buf = append(f.buf, b...)
	for {
		if !f.started {
			// Untyped: Int32 length, Int32 code; an SSLRequest or a
			// GSSENCRequest comes before the startup message.
			if len(f.buf) < 8 {
				return
			}
			n := int(binary.BigEndian.Uint32(f.buf))
			if len(f.buf) < n {
				return
			}
			code := binary.BigEndian.Uint32(f.buf[4:8])
			f.buf = f.buf[n:]
			f.started = code != 80877103 && code != 80877104
			continue
		}
		if len(f.buf) < 5 {
			return
		}
		n := 1 + int(binary.BigEndian.Uint32(f.buf[1:5]))
		if len(f.buf) < n {
			return
		}
		f.types[f.buf[0]]++
		if f.buf[0] == 'P' {
			f.parses++
			if f.buf[5] != 0 { // the statement's name, a C string
				f.named++
			}
		}
		f.buf = f.buf[n:]
	}
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.w.mu.Lock()
	if bytes.Contains(b, []byte("pgrouted-probe")) {
		c.probe = true
	}
	if c.read || c.writes == 0 {
		c.writes++
	}
	c.read = false
	c.msgs.feed(b)
	c.w.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.w.mu.Lock()
	c.read = true
	c.w.mu.Unlock()
	return n, err
}

func (w *wire) dial(next func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := next(ctx, network, addr)
		if err != nil || (w.addrs != nil && !w.addrs[addr]) {
			return nc, err
		}
		c := &countedConn{Conn: nc, w: w, addr: addr}
		w.mu.Lock()
		w.conns = append(w.conns, c)
		w.mu.Unlock()
		return c, nil
	}
}

// parses returns the Parse messages sent so far on the data connections to
// addr (every one, and those naming a statement); with addr "", on every
// connection counted, the probes' included.
func (w *wire) parses(addr string) (all, named int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.conns {
		if addr == "" || (!c.probe && c.addr == addr) {
			all += c.msgs.parses
			named += c.msgs.named
		}
	}
	return all, named
}

// messages returns the messages sent so far on the data connections to
// addr, by type.
func (w *wire) messages(addr string) [256]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n [256]int
	for _, c := range w.conns {
		if !c.probe && c.addr == addr {
			for i, k := range c.msgs.types {
				n[i] += k
			}
		}
	}
	return n
}

// trips returns the round trips so far of the data connections to addr.
func (w *wire) trips(addr string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.conns {
		if !c.probe && c.addr == addr {
			n += c.writes
		}
	}
	return n
}

// ddl runs a statement that changes the schema through db, and waits until
// the connector read the function catalog again after it: that read runs
// on a connection of the primary's pool, whose round trips the wire would
// otherwise count while a test measures.
func ddl(t *testing.T, ctx context.Context, db *sql.DB, conn *pgrouted.Connector, query string) {
	t.Helper()
	ddlOn(t, ctx, sqlClient{db}, conn, query)
}

// ddlOn is ddl through a client (the driver's or a Pool).
//
// The catalog's first read, at the connector's start, is waited for first:
// when it was still under way as the statement ran (a slow start under
// load), it ended the wait, and the read the statement asked for came
// after, inside what the test measured (seen once in CI: an INSERT …
// RETURNING counted 2 round trips to the primary).
func ddlOn(t *testing.T, ctx context.Context, c client, conn *pgrouted.Connector, query string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for conn.Stats().CatalogReads == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the function catalog was not read within 30s of the connector's start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := conn.Stats().CatalogReads
	if err := c.ExecContext(ctx, query); err != nil {
		t.Fatal(err)
	}
	for conn.Stats().CatalogReads == before {
		if time.Now().After(deadline) {
			t.Fatalf("the function catalog was not read again within 30s of %q", query)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// counting opens a connector whose connections to the cluster's nodes are
// counted, with a recorder, extra DSN parameters added.
func counting(t *testing.T, extra string) (*sql.DB, *pgrouted.Connector, *wire, *routes) {
	t.Helper()
	w := countedNodes()
	db, conn, rec := openDSN(t, cluster.DSN()+"&pgrouted_names="+names()+extra, w.tweak)
	return db, conn, w, rec
}

// countingPool is counting for a Pool.
func countingPool(t *testing.T, extra string) (*pgrouted.Pool, *wire, *routes) {
	t.Helper()
	w := countedNodes()
	p, rec := openPoolDSN(t, cluster.DSN()+"&pgrouted_names="+names()+extra, w.tweak)
	return p, w, rec
}

// countedNodes is a wire counting the connections to the cluster's nodes.
func countedNodes() *wire {
	w := &wire{addrs: map[string]bool{}}
	for _, n := range cluster.Nodes() {
		w.addrs[n.Addr()] = true
	}
	return w
}

// tweak makes cfg's hosts dial through w.
func (w *wire) tweak(cfg *pgrouted.Config) {
	for i := range cfg.Hosts {
		cc := cfg.Hosts[i].ConnConfig
		cc.DialFunc = w.dial(cc.DialFunc)
	}
}

// TestWritesReadTheirPositionInTheSameRoundTrip: an autocommit write and the
// COMMIT of a read-write transaction made with a Session read the WAL
// position after their commit pipelined with it: counted on the wire of
// the primary, a write costs one round trip, and the reads that follow
// still see it on the replicas. (Without a Session nothing is read after
// the commit: TestWritesSendWhatPgxSends.)
func TestWritesReadTheirPositionInTheSameRoundTrip(t *testing.T) {
	ctx := pgrouted.WithSession(testCtx(t), pgrouted.NewSession())
	db, conn, w, rec := counting(t, "&pgrouted_probe_interval=100ms")
	primary := cluster.Primary().Addr()
	ddl(t, ctx, db, conn, "DROP TABLE IF EXISTS roundtrips; CREATE TABLE roundtrips (id int PRIMARY KEY, v text)")
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The first use of a statement reads its description (as pgx does).
	if _, err := c.ExecContext(ctx, "INSERT INTO roundtrips (id, v) VALUES ($1, $2)", 0, "warm"); err != nil {
		t.Fatal(err)
	}
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE roundtrips SET v = $1 WHERE id = $2", "warm", 0); err != nil {
		t.Fatal(err)
	}
	var warm string
	if err := tx.QueryRowContext(ctx, "SELECT v FROM roundtrips WHERE id = $1", 0).Scan(&warm); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	check := func(what string, want int, do func() error) {
		t.Helper()
		before := w.trips(primary)
		if err := do(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := w.trips(primary) - before; got != want {
			t.Errorf("%s: %d round trips to the primary, want %d", what, got, want)
		}
	}
	readBack := func(id int, want string) {
		t.Helper()
		var v string
		if err := c.QueryRowContext(ctx, "SELECT v FROM roundtrips WHERE id = $1", id).Scan(&v); err != nil || v != want {
			t.Fatalf("read back %d: %q, %v; want %q", id, v, err, want)
		}
	}
	for i := 1; i <= 5; i++ {
		check("autocommit INSERT with arguments", 1, func() error {
			res, err := c.ExecContext(ctx, "INSERT INTO roundtrips (id, v) VALUES ($1, $2)", i, "a")
			if err == nil {
				if n, _ := res.RowsAffected(); n != 1 {
					t.Errorf("rows affected %d, want 1", n)
				}
			}
			return err
		})
		readBack(i, "a")
	}
	check("autocommit UPDATE without arguments", 1, func() error {
		_, err := c.ExecContext(ctx, "UPDATE roundtrips SET v = 'b' WHERE id = 1")
		return err
	})
	readBack(1, "b")
	check("BEGIN, UPDATE, COMMIT", 3, func() error {
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE roundtrips SET v = $1 WHERE id = $2", "c", 2); err != nil {
			return err
		}
		return tx.Commit()
	})
	readBack(2, "c")
	// Statements from cached descriptions, each sent with its savepoint
	// against a schema change made elsewhere (txstale.go): no round trip
	// more.
	check("BEGIN, SELECT, UPDATE, SELECT, COMMIT", 5, func() error {
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		var v string
		if err := tx.QueryRowContext(ctx, "SELECT v FROM roundtrips WHERE id = $1", 3).Scan(&v); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE roundtrips SET v = $1 WHERE id = $2", "d", 3); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, "SELECT v FROM roundtrips WHERE id = $1", 3).Scan(&v); err != nil || v != "d" {
			t.Errorf("read back in the transaction: %q, %v; want d", v, err)
		}
		return tx.Commit()
	})
	// A failed write raises nothing and leaves the session usable.
	check("a failing INSERT", 1, func() error {
		_, err := c.ExecContext(ctx, "INSERT INTO roundtrips (id, v) VALUES ($1, $2)", 1, "dup")
		if err == nil {
			t.Error("duplicate key: no error")
		}
		return nil
	})
	readBack(1, "b")

	var reads, onReplica int
	for _, e := range rec.snapshot() {
		if e.Op == pgrouted.OpRead {
			reads++
			if !e.Primary {
				onReplica++
			}
		}
	}
	t.Logf("%d of %d reads served by replicas", onReplica, reads)
}

// TestInsertReturningReadsItsPositionInTheSameRoundTrip: an autocommit
// INSERT … RETURNING made with a Session streams its rows, and the
// position after its commit comes in the same round trip, read when the
// rows are closed.
func TestInsertReturningReadsItsPositionInTheSameRoundTrip(t *testing.T) {
	ctx := pgrouted.WithSession(testCtx(t), pgrouted.NewSession())
	db, conn, w, _ := counting(t, "&pgrouted_probe_interval=100ms")
	primary := cluster.Primary().Addr()
	ddl(t, ctx, db, conn, "CREATE TABLE IF NOT EXISTS returning_rt (id bigserial PRIMARY KEY, v text, at timestamptz DEFAULT now(), b bytea)")
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	insert := func(v string) (int64, time.Time, []byte) {
		t.Helper()
		var id int64
		var at time.Time
		var b []byte
		if err := c.QueryRowContext(ctx, "INSERT INTO returning_rt (v, b) VALUES ($1, $2) RETURNING id, at, b", v, []byte(v)).Scan(&id, &at, &b); err != nil {
			t.Fatal(err)
		}
		return id, at, b
	}
	insert("warm")
	for i := 0; i < 5; i++ {
		before := w.trips(primary)
		id, at, b := insert(fmt.Sprint("v", i))
		if got := w.trips(primary) - before; got != 1 {
			t.Errorf("INSERT … RETURNING: %d round trips to the primary, want 1", got)
		}
		if id == 0 || at.IsZero() || string(b) != fmt.Sprint("v", i) {
			t.Errorf("returned %d, %v, %q", id, at, b)
		}
		var v string
		if err := c.QueryRowContext(ctx, "SELECT v FROM returning_rt WHERE id = $1", id).Scan(&v); err != nil || v != fmt.Sprint("v", i) {
			t.Fatalf("read back %d: %q, %v", id, v, err)
		}
	}
	// A failing INSERT … RETURNING raises nothing and the session goes on.
	if rows, err := c.QueryContext(ctx, "INSERT INTO returning_rt (id, v) VALUES (1, 'dup') RETURNING id"); err == nil {
		rows.Close()
		t.Error("duplicate key: no error from QueryContext")
	}
	insert("after")
}

// TestCheckedReadCostsOneRoundTrip: when the last probe cannot prove that a
// replica holds the caller's write, its position is checked in the same
// round trip as the read, on the connection that serves it: through the
// driver and through a Pool (whose rows are pgx's own).
func TestCheckedReadCostsOneRoundTrip(t *testing.T) {
	// Probes far apart: right after a write, only the check can tell.
	// One connection per replica pool: the read is counted on a
	// connection already open.
	const extra = "&pgrouted_probe_interval=5s&pgrouted_latency_window=off&pgrouted_replica_max_conns=1"
	t.Run("sql", func(t *testing.T) {
		db, conn, w, rec := counting(t, extra)
		checkedReadRoundTrips(t, sqlClient{db}, conn, w, rec)
	})
	t.Run("pool", func(t *testing.T) {
		p, w, rec := countingPool(t, extra)
		checkedReadRoundTrips(t, poolClient{p}, p.Connector(), w, rec)
	})
}

func checkedReadRoundTrips(t *testing.T, c client, conn *pgrouted.Connector, w *wire, rec *routes) {
	// The writes are a Session's, so that each read checks at once (one
	// read per write would not read a deferred position for long:
	// ReasonDeferred).
	ctx := pgrouted.WithSession(testCtx(t), pgrouted.NewSession())
	ddlOn(t, ctx, c, conn, "DROP TABLE IF EXISTS checked_rt; CREATE TABLE checked_rt (id int PRIMARY KEY, v text)")
	checked, seen := 0, map[string]bool{}
	for i := 0; i < 12; i++ {
		if err := c.ExecContext(ctx, "INSERT INTO checked_rt (id, v) VALUES ($1, $2)", i, "x"); err != nil {
			t.Fatal(err)
		}
		replicated(t, ctx)
		before := map[string]int{}
		for _, n := range cluster.Replicas() {
			before[n.Name()] = w.trips(n.Addr())
		}
		var v string
		if err := c.QueryRowContext(ctx, "SELECT v FROM checked_rt WHERE id = $1", i).Scan(&v); err != nil || v != "x" {
			t.Fatalf("read back %d: %q, %v", i, v, err)
		}
		ev := lastRead(t, rec)
		if ev.Primary || ev.Reason != pgrouted.ReasonCheck {
			t.Logf("read %d: %s on %s: not a checked replica read", i, ev.Reason, ev.Endpoint)
			continue
		}
		got := w.trips(cluster.Node(nodeIndex(t, ev.Endpoint)).Addr()) - before[ev.Endpoint]
		// The first read on a replica may open its connection, and the
		// first use of the statement reads its description.
		if !seen[ev.Endpoint] {
			seen[ev.Endpoint] = true
			continue
		}
		checked++
		if got != 1 {
			t.Errorf("read %d checked on %s: %d round trips, want 1", i, ev.Endpoint, got)
		}
	}
	if checked < 2 {
		t.Fatalf("only %d reads were checked on a replica: the test did not exercise the check", checked)
	}
}

func nodeIndex(t *testing.T, name string) int {
	t.Helper()
	for i, n := range cluster.Nodes() {
		if n.Name() == name {
			return i
		}
	}
	t.Fatalf("no node %s", name)
	return -1
}

// TestReadOfATableJustCreated: the first read of a statement must be
// described before it can be pipelined with the replica's position check;
// a replica that has not replayed the CREATE TABLE yet cannot describe it,
// so it is checked first and the read runs where the table is.
func TestReadOfATableJustCreated(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	db, _, rec := open(t)
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Latency(200 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 4; i++ {
		table := fmt.Sprintf("just_created_%d", i)
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (id int, v text)"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" VALUES ($1, $2)", i, "x"); err != nil {
			t.Fatal(err)
		}
		var v string
		if err := db.QueryRowContext(ctx, "SELECT v FROM "+table+" WHERE id = $1", i).Scan(&v); err != nil || v != "x" {
			t.Fatalf("read of %s right after creating it: %q, %v", table, v, err)
		}
		ev := lastRead(t, rec)
		t.Logf("%s: read on %s (%s)", table, ev.Endpoint, ev.Reason)
	}
}

// TestAutocommitWriteReturningRows is a driver regression test: an
// autocommit write run with QueryContext (INSERT ... RETURNING, what every
// ORM runs to create a row) on a connection whose primary session already
// ran a write. After the write, pgrouted reads the primary's WAL position
// (SELECT pg_current_wal_insert_lsn()) on the same pgx connection while the
// statement's rows are still open; once that statement is in pgx's cache,
// pgconn resets its one shared ResultReader before it finds the connection
// busy, and the open rows are destroyed: stdlib.Rows.Next panics (index out
// of range).
func TestAutocommitWriteReturningRows(t *testing.T) {
	ctx := testCtx(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS returning_bug; CREATE TABLE returning_bug (id bigserial PRIMARY KEY, name text)")
	replicated(t, ctx)
	db, _, _ := open(t)
	db.SetMaxOpenConns(1) // the same primary session for both statements
	if _, err := db.ExecContext(ctx, "INSERT INTO returning_bug (name) VALUES ('first')"); err != nil {
		t.Fatal(err)
	}
	var id int64
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return db.QueryRowContext(ctx, "INSERT INTO returning_bug (name) VALUES ('second') RETURNING id").Scan(&id)
	}()
	if err != nil || id == 0 {
		t.Fatalf("INSERT ... RETURNING in autocommit after an earlier write on the same connection: id %d, %v", id, err)
	}
}

// TestPipelinedStatementsArePreparedOnce: as pgx's default mode
// (cache_statement) does, the pipelined paths prepare a statement once per
// connection, as a named statement, and execute it without a Parse from
// then on: the write and the read of its position on the primary (a write
// with a Session: one without defers its position: internal/consistency), and the
// position check and the read on a replica. Under cache_describe, chosen
// in the DSN, they send the unnamed statement, parsed at every execution,
// as pgx does then.
func TestPipelinedStatementsArePreparedOnce(t *testing.T) {
	for _, mode := range []string{"", "cache_describe"} {
		t.Run("mode="+mode, func(t *testing.T) {
			extra := "&pgrouted_probe_interval=5s&pgrouted_latency_window=off&pgrouted_replica_max_conns=1"
			if mode != "" {
				extra += "&default_query_exec_mode=" + mode
			}
			ctx := pgrouted.WithSession(testCtx(t), pgrouted.NewSession())
			db, conn, w, rec := counting(t, extra)
			db.SetMaxOpenConns(1)
			table := "prepared_once" + strings.ReplaceAll(mode, "_", "")
			ddl(t, ctx, db, conn, "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+" (id int PRIMARY KEY, v text)")
			primary := cluster.Primary().Addr()
			insert := "INSERT INTO " + table + " (id, v) VALUES ($1, $2)"
			read := "SELECT v FROM " + table + " WHERE id = $1"
			checked, seen := 0, map[string]bool{}
			for i := 0; i < 12; i++ {
				all, named := w.parses(primary)
				trips := w.trips(primary)
				if _, err := db.ExecContext(ctx, insert, i, "x"); err != nil {
					t.Fatal(err)
				}
				all, named = subtract(w.parses(primary))(all, named)
				if got := w.trips(primary) - trips; i > 0 && got != 1 {
					t.Errorf("INSERT %d: %d round trips, want 1", i, got)
				}
				switch {
				case i == 0:
					// The first one prepares the INSERT (when it is
					// described) and the position query (pipelined).
					if mode == "" && named != 2 {
						t.Errorf("first INSERT: %d Parse messages named; want 2", named)
					}
				case mode == "" && all != 0:
					t.Errorf("INSERT %d: %d Parse messages; want none: its statement and the position query are prepared", i, all)
				case mode != "" && (named != 0 || all != 2):
					t.Errorf("INSERT %d: %d Parse messages, %d named; want 2 unnamed (the write, the position query)", i, all, named)
				}
				replicated(t, ctx)
				before := map[string][2]int{}
				for _, n := range cluster.Replicas() {
					a, nm := w.parses(n.Addr())
					before[n.Name()] = [2]int{a, nm}
				}
				var v string
				if err := db.QueryRowContext(ctx, read, i).Scan(&v); err != nil || v != "x" {
					t.Fatalf("read back %d: %q, %v", i, v, err)
				}
				ev := lastRead(t, rec)
				if ev.Primary || ev.Reason != pgrouted.ReasonCheck {
					t.Logf("read %d: %s on %s: not a checked replica read", i, ev.Reason, ev.Endpoint)
					continue
				}
				a, nm := w.parses(cluster.Node(nodeIndex(t, ev.Endpoint)).Addr())
				a, nm = a-before[ev.Endpoint][0], nm-before[ev.Endpoint][1]
				if !seen[ev.Endpoint] {
					// The first on a replica prepares the check and the
					// read.
					seen[ev.Endpoint] = true
					continue
				}
				checked++
				if mode == "" && a != 0 {
					t.Errorf("read %d checked on %s: %d Parse messages, want none", i, ev.Endpoint, a)
				}
				if mode != "" && (nm != 0 || a != 2) {
					t.Errorf("read %d checked on %s: %d Parse messages, %d named; want 2 unnamed (the check, the read)", i, ev.Endpoint, a, nm)
				}
			}
			if checked < 2 {
				t.Fatalf("only %d reads were checked on a replica again: the test did not exercise the check", checked)
			}
			// Inside a transaction: the statement (after another, so
			// that it is sent with its savepoint from the second
			// transaction on, its description being cached then: the
			// transaction's first needs none) and the position read with
			// the COMMIT. SELECT 1, without arguments, is sent by pgx
			// with the simple protocol: no Parse.
			update := "UPDATE " + table + " SET v = $1 WHERE id = $2"
			for i := 0; i < 4; i++ {
				all, named := w.parses(primary)
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, update, "y", i); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				all, named = subtract(w.parses(primary))(all, named)
				switch {
				case i < 2:
				case mode == "" && all != 0:
					t.Errorf("transaction %d: %d Parse messages; want none: the savepoint, the statement, the release, COMMIT and the position query are prepared", i, all)
				case mode != "" && (all != 5 || named != 0):
					t.Errorf("transaction %d: %d Parse messages, %d named; want 5 unnamed (SAVEPOINT, UPDATE, RELEASE, COMMIT, the position query)", i, all, named)
				}
			}
		})
	}
}

// subtract returns a function that subtracts earlier counts from now's.
func subtract(all, named int) func(int, int) (int, int) {
	return func(a, n int) (int, int) { return all - a, named - n }
}
