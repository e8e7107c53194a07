package main

import (
	"bytes"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/examples/internal/clustertest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// open opens a *sql.DB on an empty database with the example's schema,
// through OpenWithHooks with a recorder, and waits until reads go to the
// replicas.
func open(t *testing.T, extra ...string) (*sql.DB, *pgrouted.Connector, *clustertest.Recorder) {
	t.Helper()
	migrate := clustertest.Clean(t, "users", "posts")
	rec := &clustertest.Recorder{}
	db, conn, err := OpenWithHooks(clustertest.DSN(extra...), rec.Record)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clustertest.WaitCatalog(t, conn)
	if migrate {
		if _, err := db.ExecContext(clustertest.Ctx(t), Schema); err != nil {
			t.Fatal(err)
		}
		clustertest.Migrated()
	}
	clustertest.WaitReplicaRoute(t, conn)
	return db, conn, rec
}

// where runs SELECT inet_server_port(), pg_is_in_recovery() through q and
// names the node that really ran it.
func where(t *testing.T, row *sql.Row) (node string, inRecovery bool) {
	t.Helper()
	var port int
	if err := row.Scan(&port, &inRecovery); err != nil {
		t.Fatal(err)
	}
	return clustertest.NodeByPort(t, port), inRecovery
}

const whereSQL = "SELECT inet_server_port(), pg_is_in_recovery()"

func TestWorkload(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	clustertest.Workload(t, Store{DB: db}, conn, rec)
}

func TestProgram(t *testing.T) {
	defer clustertest.Guard(t)
	clustertest.Reset(t)
	var out bytes.Buffer
	if err := run(clustertest.Ctx(t), clustertest.DSN(), &out); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	for _, want := range []string{
		"write on node0 (write): CREATE TABLE",
		"write on node0 (write): INSERT INTO greetings",
		"read  on node0 (forced): SELECT pg_is_in_recovery()",
		`read back "hello"; 1 greetings`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestOpenByDriverName: sql.Open("pgrouted", dsn) alone routes: reads
// reach a replica, writes the primary, as the servers themselves say.
func TestOpenByDriverName(t *testing.T) {
	defer clustertest.Guard(t)
	clustertest.Reset(t)
	ctx := clustertest.Ctx(t)
	db, err := Open(clustertest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The first probes have to learn the roles: until then reads go to
	// the primary.
	clustertest.UntilReplica(t, `reads through sql.Open("pgrouted")`, func() (string, bool) { return where(t, db.QueryRowContext(ctx, whereSQL)) })
	if node, rec := where(t, db.QueryRowContext(ctx, "/* pgrouted:primary */ "+whereSQL)); rec || node != "node0" {
		t.Errorf("a read forced to the primary ran on %s", node)
	}
}

func TestCRUD(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	s := Store{DB: db}
	mark := rec.Mark()
	id, err := s.CreateUser(ctx, "ada")
	if err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "INSERT ... RETURNING", rec.Since(mark))
	// Read after create: the replicas do not have it yet; pgrouted sends
	// the read to the primary, or to a replica once it has replayed it.
	name, _, found, err := s.User(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, found && name == "ada", "read after create: %q, %v", name, found)

	clustertest.WaitReplicaRoute(t, conn)
	mark = rec.Mark()
	name, _, found, err = s.User(ctx, id)
	if err != nil || !found || name != "ada" {
		t.Fatalf("read: %q %v %v", name, found, err)
	}
	clustertest.OnReplicas(t, "reads once the replicas caught up", rec.Since(mark))

	mark = rec.Mark()
	if err := s.Rename(ctx, id, "ada lovelace"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUser(ctx, -1); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "UPDATE and DELETE", rec.Since(mark))
	name, _, _, _ = s.User(ctx, id)
	clustertest.Fresh(t, name == "ada lovelace", "read after update: %q", name)
	if err := s.DeleteUser(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _, found, _ = s.User(ctx, id)
	clustertest.Fresh(t, !found, "read after delete found the user")
}

// TestTransactions: a transaction runs on the primary, savepoints included;
// a read-only one on a replica.
func TestTransactions(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	mark := rec.Mark()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var uid int64
	if err := tx.QueryRowContext(ctx, "INSERT INTO users (name) VALUES ('tx') RETURNING id").Scan(&uid); err != nil {
		t.Fatal(err)
	}
	// database/sql has no nested transactions: a savepoint is SQL.
	if _, err := tx.ExecContext(ctx, "SAVEPOINT inner_tx"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO posts (user_id, title) VALUES ($1, 'rolled back')", uid); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT inner_tx"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO posts (user_id, title) VALUES ($1, 'kept')", uid); err != nil {
		t.Fatal(err)
	}
	if node, rec := where(t, tx.QueryRowContext(ctx, whereSQL)); rec || node != "node0" {
		t.Errorf("a read in a transaction ran on %s", node)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "transaction", rec.Since(mark))
	_, posts, _, err := Store{DB: db}.User(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, len(posts) == 1 && posts[0] == "kept", "after commit: posts %q, want [kept]", posts)

	// A read-only transaction runs on a replica that holds the commit.
	clustertest.WaitReplicaRoute(t, conn)
	ro, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Rollback()
	if node, rec := where(t, ro.QueryRowContext(ctx, whereSQL)); !rec || !clustertest.IsReplica(node) {
		t.Errorf("a read-only transaction ran on %s", node)
	}
	var n int
	if err := ro.QueryRowContext(ctx, "SELECT count(*) FROM posts WHERE user_id = $1", uid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, n == 1, "read-only transaction on a replica: %d posts, want 1", n)
}

// TestLockingUpsertPrepared: FOR UPDATE, upserts with RETURNING and
// prepared writes run on the primary; prepared reads on replicas.
func TestLockingUpsertPrepared(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	const upsert = `INSERT INTO users (name, email) VALUES ($1, $2)
		ON CONFLICT (email) DO UPDATE SET name = excluded.name RETURNING id, name`
	mark := rec.Mark()
	var id1, id2 int64
	var name string
	if err := db.QueryRowContext(ctx, upsert, "grace", "grace@example.com").Scan(&id1, &name); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, upsert, "grace hopper", "grace@example.com").Scan(&id2, &name); err != nil {
		t.Fatal(err)
	}
	if id1 != id2 || name != "grace hopper" {
		t.Errorf("upsert: ids %d, %d, name %q", id1, id2, name)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT name FROM users WHERE id = $1 FOR UPDATE", id1).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE users SET balance = balance + 10 WHERE id = $1", id1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// FOR UPDATE outside a transaction is a lock too: the primary.
	if err := db.QueryRowContext(ctx, "SELECT name FROM users WHERE id = $1 FOR UPDATE", id1).Scan(&name); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "upsert and locks", rec.Since(mark))

	read, err := db.PrepareContext(ctx, "SELECT balance FROM users WHERE id = $1")
	if err != nil {
		t.Fatal(err)
	}
	defer read.Close()
	write, err := db.PrepareContext(ctx, "UPDATE users SET balance = balance + $1 WHERE id = $2")
	if err != nil {
		t.Fatal(err)
	}
	defer write.Close()
	clustertest.WaitReplicaRoute(t, conn)
	mark = rec.Mark()
	for i := 0; i < 4; i++ {
		var b int64
		if err := read.QueryRowContext(ctx, id1).Scan(&b); err != nil {
			t.Fatal(err)
		}
		clustertest.Fresh(t, b == 10, "balance %d, want 10", b)
	}
	clustertest.OnReplicas(t, "prepared reads", rec.Since(mark))
	mark = rec.Mark()
	if _, err := write.ExecContext(ctx, 5, id1); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "prepared write", rec.Since(mark))
	var b int64
	if err := read.QueryRowContext(ctx, id1).Scan(&b); err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, b == 15, "prepared read after prepared write: balance %d, want 15", b)
}

// TestForcedRouting: a context or a comment forces the route.
func TestForcedRouting(t *testing.T) {
	defer clustertest.Guard(t)
	db, _, rec := open(t)
	ctx := clustertest.Ctx(t)
	mark := rec.Mark()
	primary := pgrouted.WithRoute(ctx, pgrouted.Primary)
	if node, r := where(t, db.QueryRowContext(primary, whereSQL)); r || node != "node0" {
		t.Errorf("WithRoute(Primary): ran on %s", node)
	}
	if node, r := where(t, db.QueryRowContext(ctx, "/* pgrouted:primary */ "+whereSQL)); r || node != "node0" {
		t.Errorf("/* pgrouted:primary */: ran on %s", node)
	}
	clustertest.OnPrimary(t, "forced to the primary", rec.Since(mark))
	replica := pgrouted.WithRoute(ctx, pgrouted.Replica)
	if node, r := where(t, db.QueryRowContext(replica, whereSQL)); !r || !clustertest.IsReplica(node) {
		t.Errorf("WithRoute(Replica): ran on %s", node)
	}
	_, err := db.ExecContext(replica, "DELETE FROM users")
	if !errors.Is(err, pgrouted.ErrWriteOnReplica) {
		t.Errorf("a write forced to a replica: %v, want ErrWriteOnReplica", err)
	}
}
