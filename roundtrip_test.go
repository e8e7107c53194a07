package pgrouted_test

import (
	"bytes"
	"context"
	"database/sql"
	"net"
	"sync"
	"testing"

	"github.com/pgrouted/pgrouted"
)

// wire counts the round trips of the connections dialled to one address,
// leaving out the topology's probe connections: a round trip starts each
// time the client writes after it has read.
type wire struct {
	addr  string
	mu    sync.Mutex
	conns []*countedConn
}

type countedConn struct {
	net.Conn
	w      *wire
	probe  bool // its startup message names the probe's application
	read   bool // the last operation was a read
	writes int  // bursts of writes that followed a read: round trips
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
		if err != nil || addr != w.addr {
			return nc, err
		}
		c := &countedConn{Conn: nc, w: w}
		w.mu.Lock()
		w.conns = append(w.conns, c)
		w.mu.Unlock()
		return c, nil
	}
}

// trips returns the round trips of the data connections so far.
func (w *wire) trips() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.conns {
		if !c.probe {
			n += c.writes
		}
	}
	return n
}

// TestWritesReadTheirPositionInTheSameRoundTrip: an autocommit write and the
// COMMIT of a read-write transaction read the WAL position after their
// commit pipelined with it: counted on the wire of the primary, a write
// costs one round trip, and the reads that follow still see it on the
// replicas.
func TestWritesReadTheirPositionInTheSameRoundTrip(t *testing.T) {
	ctx := testCtx(t)
	cfg, err := pgrouted.ParseConfig(cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_names=" + names())
	if err != nil {
		t.Fatal(err)
	}
	w := &wire{addr: cluster.Primary().Addr()}
	for i := range cfg.Hosts {
		cc := cfg.Hosts[i].ConnConfig
		next := cc.DialFunc
		cc.DialFunc = w.dial(next)
	}
	rec := &routes{}
	cfg.OnRoute = rec.record
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	waitReplicaRoute(t, conn)
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS roundtrips (id int PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
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
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	check := func(what string, want int, do func() error) {
		t.Helper()
		before := w.trips()
		if err := do(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := w.trips() - before; got != want {
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
	// A failed write raises nothing and leaves the session usable.
	check("a failing INSERT", 1, func() error {
		_, err := c.ExecContext(ctx, "INSERT INTO roundtrips (id, v) VALUES ($1, $2)", 1, "dup")
		if err == nil {
			t.Error("duplicate key: no error")
		}
		return nil
	})
	readBack(1, "b")

	var onReplica int
	for _, e := range rec.snapshot() {
		if e.Op == pgrouted.OpRead && !e.Primary {
			onReplica++
		}
	}
	t.Logf("%d of 7 reads back served by replicas", onReplica)
}
