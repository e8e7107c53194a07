package main

import (
	"bytes"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jmoiron/sqlx"
	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/examples/internal/clustertest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// open opens sqlx through OpenWithHooks with a recorder on an empty
// database, migrates it, and waits until reads go to the replicas.
func open(t *testing.T) (*sqlx.DB, *pgrouted.Connector, *clustertest.Recorder) {
	t.Helper()
	migrate := clustertest.Clean(t, "users", "posts")
	rec := &clustertest.Recorder{}
	db, conn, err := OpenWithHooks(clustertest.DSN(), rec.Record)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clustertest.WaitCatalog(t, conn)
	if migrate {
		if err := Migrate(clustertest.Ctx(t), db); err != nil {
			t.Fatal(err)
		}
		clustertest.Migrated()
	}
	clustertest.WaitReplicaRoute(t, conn)
	return db, conn, rec
}

type whereRow struct {
	Port       int  `db:"port"`
	InRecovery bool `db:"in_recovery"`
}

const whereSQL = "SELECT inet_server_port() AS port, pg_is_in_recovery() AS in_recovery"

// where names the node that really ran a statement through q.
func where(t *testing.T, get func(dest any, query string, args ...any) error) (node string, inRecovery bool) {
	t.Helper()
	var r whereRow
	if err := get(&r, whereSQL); err != nil {
		t.Fatal(err)
	}
	return clustertest.NodeByPort(t, r.Port), r.InRecovery
}

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
		"tx    on node0 (write): BEGIN",
		"write on node0 (in-tx): CREATE TABLE users",
		"tx    on node0 (in-tx): COMMIT",
		"write on node0 (write): INSERT INTO users (name) VALUES ($1) RETURNING id",
		"write on node0 (write): INSERT INTO posts (user_id, title) VALUES ($1, $2)",
		"read  on node0 (forced): SELECT pg_is_in_recovery()",
		"read back ada with 1 post(s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestOpenByDriverName: sqlx.Open("pgrouted", dsn), with the bind type
// registered, rebinds ? and :name to $N, and routes.
func TestOpenByDriverName(t *testing.T) {
	defer clustertest.Guard(t)
	clustertest.Reset(t)
	ctx := clustertest.Ctx(t)
	db, err := Open(clustertest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if sqlx.BindType(db.DriverName()) != sqlx.DOLLAR {
		t.Fatalf("bind type %d, want DOLLAR", sqlx.BindType(db.DriverName()))
	}
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.NamedExecContext(ctx, "INSERT INTO users (name, email) VALUES (:name, :email)", User{Name: "named", Email: sql.NullString{String: "n@example.com", Valid: true}}); err != nil {
		t.Fatal(err)
	}
	var u User
	if err := db.GetContext(ctx, &u, db.Rebind("SELECT * FROM users WHERE email = ?"), "n@example.com"); err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, u.Name == "named", "read after named insert: %+v", u)
	clustertest.UntilReplica(t, `reads through sqlx.Open("pgrouted")`, func() (string, bool) {
		return where(t, func(d any, q string, a ...any) error { return db.GetContext(ctx, d, q, a...) })
	})
	if node, rec := where(t, func(d any, q string, a ...any) error {
		return db.GetContext(pgrouted.WithRoute(ctx, pgrouted.Primary), d, q, a...)
	}); rec || node != "node0" {
		t.Errorf("a read forced to the primary ran on %s", node)
	}
}

// TestUnknownBindType: what happens without BindDriver: sqlx keeps ? in
// named queries for a driver name it does not know, and PostgreSQL
// rejects them; sqlx.NewDb(db, "postgres") needs no registration.
func TestUnknownBindType(t *testing.T) {
	defer clustertest.Guard(t)
	db, _, _ := open(t)
	ctx := clustertest.Ctx(t)
	unknown := sqlx.NewDb(db.DB, "some-driver-sqlx-does-not-know")
	if sqlx.BindType(unknown.DriverName()) != sqlx.UNKNOWN {
		t.Fatalf("bind type %d", sqlx.BindType(unknown.DriverName()))
	}
	_, err := unknown.NamedExecContext(ctx, "INSERT INTO users (name) VALUES (:name)", User{Name: "x"})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42601" {
		t.Errorf("named query with an unknown bind type: %v, want a syntax error (42601)", err)
	}
	if got := unknown.Rebind("SELECT ?"); got != "SELECT ?" {
		t.Errorf("Rebind with an unknown bind type: %q", got)
	}
	if got := sqlx.NewDb(db.DB, "postgres").Rebind("SELECT ?"); got != "SELECT $1" {
		t.Errorf("Rebind for postgres: %q", got)
	}
	if got := sqlx.NewDb(db.DB, "pgrouted").Rebind("SELECT ?"); got != "SELECT $1" {
		t.Errorf("Rebind for pgrouted after BindDriver: %q", got)
	}
}

// TestMigrations: the migration transaction runs on the primary; applying
// again changes nothing, and the version read runs where the transaction
// does.
func TestMigrations(t *testing.T) {
	defer clustertest.Guard(t)
	clustertest.Reset(t)
	db, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	clustertest.OnPrimary(t, "migrations", clustertest.Matching(rec.Events(), "CREATE"))
	clustertest.WaitReplicaRoute(t, conn)
	mark := rec.Mark()
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	for _, e := range rec.Since(mark) {
		if strings.Contains(e.Query, "INSERT") || (strings.Contains(e.Query, "CREATE") && !strings.Contains(e.Query, "IF NOT EXISTS")) {
			t.Errorf("a second Migrate changed something: %q", e.Query)
		}
	}
	clustertest.OnPrimary(t, "migration transaction", rec.Since(mark))
	var n int
	if err := db.GetContext(ctx, &n, "SELECT count(*) FROM schema_migrations"); err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, n == len(migrations), "%d migrations recorded, want %d", n, len(migrations))
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
	name, _, found, err := s.User(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, found && name == "ada", "read after create: %q %v", name, found)
	clustertest.WaitReplicaRoute(t, conn)
	mark = rec.Mark()
	var users []User
	if err := db.SelectContext(ctx, &users, "SELECT * FROM users"); err != nil || len(users) != 1 {
		t.Fatalf("select: %v %v", users, err)
	}
	clustertest.OnReplicas(t, "Select once the replicas hold the write", rec.Since(mark))
	mark = rec.Mark()
	if err := s.Rename(ctx, id, "ada lovelace"); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "UPDATE", rec.Since(mark))
	name, _, _, _ = s.User(ctx, id)
	clustertest.Fresh(t, name == "ada lovelace", "read after update: %q", name)
	if err := s.DeleteUser(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _, found, _ = s.User(ctx, id)
	clustertest.Fresh(t, !found, "read after delete found the user")
}

// TestTransactions: Beginx and savepoints (sqlx has no nested
// transactions: a savepoint is SQL) on the primary; a read-only
// transaction on a replica.
func TestTransactions(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	mark := rec.Mark()
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var uid int64
	if err := tx.GetContext(ctx, &uid, "INSERT INTO users (name) VALUES ('tx') RETURNING id"); err != nil {
		t.Fatal(err)
	}
	tx.MustExecContext(ctx, "SAVEPOINT draft")
	if _, err := tx.NamedExecContext(ctx, "INSERT INTO posts (user_id, title) VALUES (:user_id, :title)", Post{UserID: uid, Title: "rolled back"}); err != nil {
		t.Fatal(err)
	}
	tx.MustExecContext(ctx, "ROLLBACK TO SAVEPOINT draft")
	if _, err := tx.NamedExecContext(ctx, "INSERT INTO posts (user_id, title) VALUES (:user_id, :title)", Post{UserID: uid, Title: "kept"}); err != nil {
		t.Fatal(err)
	}
	if node, rec := where(t, func(d any, q string, a ...any) error { return tx.GetContext(ctx, d, q, a...) }); rec || node != "node0" {
		t.Errorf("a read in a transaction ran on %s", node)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "transaction with a savepoint", rec.Since(mark))
	_, posts, _, err := Store{DB: db}.User(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, len(posts) == 1 && posts[0] == "kept", "after commit: %q, want [kept]", posts)

	clustertest.WaitReplicaRoute(t, conn)
	ro, err := db.BeginTxx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Rollback()
	if node, rec := where(t, func(d any, q string, a ...any) error { return ro.GetContext(ctx, d, q, a...) }); !rec || !clustertest.IsReplica(node) {
		t.Errorf("a read-only transaction ran on %s", node)
	}
	var n int
	if err := ro.GetContext(ctx, &n, ro.Rebind("SELECT count(*) FROM posts WHERE user_id = ?"), uid); err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, n == 1, "read-only transaction on a replica: %d posts, want 1", n)
}

// TestAssociationsAndPagination: eager loading with sqlx.In, a join into
// embedded structs, and pages, on replicas once they hold the writes.
func TestAssociationsAndPagination(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	s := Store{DB: db}
	var ids []int64
	for i := 0; i < 7; i++ {
		id, err := s.CreateUser(ctx, "u")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		s.AddPost(ctx, id, "a")
		s.AddPost(ctx, id, "b")
	}
	clustertest.WaitReplicaRoute(t, conn)
	mark := rec.Mark()
	by, err := s.PostsOf(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	ok := len(by) == 7
	for _, p := range by {
		ok = ok && len(p) == 2
	}
	clustertest.Fresh(t, ok, "sqlx.In eager load: %d users with posts", len(by))
	var joined []struct {
		Post `db:"p"`
		User `db:"u"`
	}
	if err := db.SelectContext(ctx, &joined, `SELECT p.id "p.id", p.user_id "p.user_id", p.title "p.title",
		u.id "u.id", u.name "u.name", u.email "u.email", u.balance "u.balance"
		FROM posts p JOIN users u ON u.id = p.user_id ORDER BY p.id`); err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, len(joined) == 14 && joined[0].User.ID == ids[0], "join: %d rows", len(joined))
	var listed []int64
	for offset := 0; ; offset += 3 {
		page, err := s.Page(ctx, offset, 3)
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, page...)
		if len(page) < 3 {
			break
		}
	}
	clustertest.Fresh(t, len(listed) == 7 && listed[0] == ids[0] && listed[6] == ids[6], "pages: %v", listed)
	clustertest.OnReplicas(t, "eager loading, join and pagination", rec.Since(mark))
}

// TestUpsertReturning: a named upsert with RETURNING runs on the primary.
func TestUpsertReturning(t *testing.T) {
	defer clustertest.Guard(t)
	db, _, rec := open(t)
	ctx := clustertest.Ctx(t)
	const upsert = `INSERT INTO users (name, email) VALUES (:name, :email)
		ON CONFLICT (email) DO UPDATE SET name = excluded.name RETURNING *`
	email := sql.NullString{String: "grace@example.com", Valid: true}
	mark := rec.Mark()
	var got []User
	for _, name := range []string{"grace", "grace hopper"} {
		rows, err := db.NamedQueryContext(ctx, upsert, User{Name: name, Email: email})
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var u User
			if err := rows.StructScan(&u); err != nil {
				t.Fatal(err)
			}
			got = append(got, u)
		}
		rows.Close()
	}
	if len(got) != 2 || got[0].ID != got[1].ID || got[1].Name != "grace hopper" {
		t.Errorf("upserts returned %+v", got)
	}
	clustertest.OnPrimary(t, "upserts", rec.Since(mark))
	var u User
	if err := db.GetContext(ctx, &u, "SELECT * FROM users WHERE email = $1", email.String); err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, u.Name == "grace hopper", "read after upsert: %+v", u)
}

// TestLocking: SELECT ... FOR UPDATE in a transaction runs on the primary.
func TestLocking(t *testing.T) {
	defer clustertest.Guard(t)
	db, _, rec := open(t)
	ctx := clustertest.Ctx(t)
	id, err := Store{DB: db}.CreateUser(ctx, "locked")
	if err != nil {
		t.Fatal(err)
	}
	mark := rec.Mark()
	tx := db.MustBeginTx(ctx, nil)
	var u User
	if err := tx.GetContext(ctx, &u, tx.Rebind("SELECT * FROM users WHERE id = ? FOR UPDATE"), id); err != nil {
		t.Fatal(err)
	}
	tx.MustExecContext(ctx, tx.Rebind("UPDATE users SET balance = ? WHERE id = ?"), u.Balance+70, id)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "FOR UPDATE in a transaction", rec.Since(mark))
	if err := db.GetContext(ctx, &u, "SELECT * FROM users WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, u.Balance == 70, "balance after the locked update: %d", u.Balance)
}

// TestPrepared: Preparex and PrepareNamed statements are routed at each
// execution: reads on replicas, writes on the primary.
func TestPrepared(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	id, err := Store{DB: db}.CreateUser(ctx, "prepared")
	if err != nil {
		t.Fatal(err)
	}
	read, err := db.PreparexContext(ctx, db.Rebind("SELECT * FROM users WHERE id = ?"))
	if err != nil {
		t.Fatal(err)
	}
	defer read.Close()
	write, err := db.PrepareNamedContext(ctx, "UPDATE users SET balance = balance + :balance WHERE id = :id")
	if err != nil {
		t.Fatal(err)
	}
	defer write.Close()
	clustertest.WaitReplicaRoute(t, conn)
	mark := rec.Mark()
	for i := 0; i < 4; i++ {
		var u User
		if err := read.GetContext(ctx, &u, id); err != nil {
			t.Fatal(err)
		}
		clustertest.Fresh(t, u.Name == "prepared", "prepared read: %+v", u)
	}
	clustertest.OnReplicas(t, "prepared reads", rec.Since(mark))
	mark = rec.Mark()
	if _, err := write.ExecContext(ctx, User{ID: id, Balance: 5}); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "prepared named write", rec.Since(mark))
	var u User
	if err := read.GetContext(ctx, &u, id); err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, u.Balance == 5, "prepared read after prepared write: %+v", u)
}

// TestForcedRouting: the route travels in the context of every sqlx call.
func TestForcedRouting(t *testing.T) {
	defer clustertest.Guard(t)
	db, _, rec := open(t)
	ctx := clustertest.Ctx(t)
	mark := rec.Mark()
	primary := pgrouted.WithRoute(ctx, pgrouted.Primary)
	if node, r := where(t, func(d any, q string, a ...any) error { return db.GetContext(primary, d, q, a...) }); r || node != "node0" {
		t.Errorf("WithRoute(Primary): ran on %s", node)
	}
	var users []User
	if err := db.SelectContext(primary, &users, "SELECT * FROM users"); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "forced to the primary", rec.Since(mark))
	replica := pgrouted.WithRoute(ctx, pgrouted.Replica)
	if node, r := where(t, func(d any, q string, a ...any) error { return db.GetContext(replica, d, q, a...) }); !r || !clustertest.IsReplica(node) {
		t.Errorf("WithRoute(Replica): ran on %s", node)
	}
	if _, err := db.NamedExecContext(replica, "DELETE FROM users WHERE id = :id", User{ID: 1}); !errors.Is(err, pgrouted.ErrWriteOnReplica) {
		t.Errorf("a write forced to a replica: %v, want ErrWriteOnReplica", err)
	}
}
