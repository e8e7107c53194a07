package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/examples/ent/entdb"
	"github.com/pgrouted/pgrouted/examples/ent/entdb/user"
	"github.com/pgrouted/pgrouted/examples/internal/clustertest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// open opens an ent client through OpenWithHooks with a recorder on an
// empty database, migrates it, and waits until reads go to the replicas.
func open(t *testing.T) (*entdb.Client, *pgrouted.Connector, *clustertest.Recorder) {
	t.Helper()
	migrate := clustertest.Clean(t, "users", "posts")
	rec := &clustertest.Recorder{}
	client, conn, err := OpenWithHooks(clustertest.DSN(), rec.Record)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	clustertest.WaitCatalog(t, conn)
	if migrate {
		if err := Migrate(clustertest.Ctx(t), client); err != nil {
			t.Fatal(err)
		}
		clustertest.Migrated()
	}
	clustertest.WaitReplicaRoute(t, conn)
	return client, conn, rec
}

// querier is what ent's client and transactions offer for raw SQL (the
// sql/execquery feature).
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// where names the node that really ran a raw statement through q.
func where(t *testing.T, ctx context.Context, q querier) (node string, inRecovery bool) {
	t.Helper()
	rows, err := q.QueryContext(ctx, "SELECT inet_server_port(), pg_is_in_recovery()")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var port int
	if !rows.Next() {
		t.Fatalf("no row: %v", rows.Err())
	}
	if err := rows.Scan(&port, &inRecovery); err != nil {
		t.Fatal(err)
	}
	return clustertest.NodeByPort(t, port), inRecovery
}

func TestWorkload(t *testing.T) {
	defer clustertest.Guard(t)
	client, conn, rec := open(t)
	clustertest.Workload(t, Store{Client: client}, conn, rec)
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
		`write on node0 (in-tx): CREATE TABLE "users"`,
		`write on node0 (write): INSERT INTO "users"`,
		`write on node0 (write): INSERT INTO "posts"`,
		`read  on node0 (forced): SELECT`,
		"read back ada with 1 post(s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestOpenByDriverName: sql.Open("pgrouted", dsn) under ent's dialect:
// the servers say reads ran on a replica and writes on the primary.
func TestOpenByDriverName(t *testing.T) {
	defer clustertest.Guard(t)
	clustertest.Reset(t)
	ctx := clustertest.Ctx(t)
	client, err := Open(clustertest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := Migrate(ctx, client); err != nil {
		t.Fatal(err)
	}
	u, err := client.User.Create().SetName("by driver name").Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := client.User.Get(ctx, u.ID)
	clustertest.Fresh(t, err == nil && got.Name == u.Name, "read after create: %v, %v", got, err)
	clustertest.UntilReplica(t, `reads through sql.Open("pgrouted") under ent`, func() (string, bool) { return where(t, ctx, client) })
	if node, rec := where(t, pgrouted.WithRoute(ctx, pgrouted.Primary), client); rec || node != "node0" {
		t.Errorf("a read forced to the primary ran on %s", node)
	}
}

// TestMigrations: ent's migration, forced to the primary, runs there
// entirely, its catalog reads included, and is idempotent.
func TestMigrations(t *testing.T) {
	defer clustertest.Guard(t)
	clustertest.Reset(t)
	client, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	events := withContext(rec.Events())
	clustertest.OnPrimary(t, "migration", events)
	if len(clustertest.Matching(events, `CREATE TABLE "posts"`)) != 1 || len(clustertest.Matching(events, "INFORMATION_SCHEMA")) == 0 {
		t.Errorf("migration: %+v", events)
	}
	clustertest.WaitReplicaRoute(t, conn)
	mark := rec.Mark()
	if err := Migrate(ctx, client); err != nil {
		t.Fatal(err)
	}
	again := withContext(rec.Since(mark))
	clustertest.OnPrimary(t, "second migration", again)
	for _, e := range again {
		if strings.HasPrefix(e.Query, "CREATE") || strings.HasPrefix(e.Query, "ALTER") {
			t.Errorf("a second migration changed something: %q", e.Query)
		}
	}
}

// withContext leaves out the statements that Atlas, under ent's
// migration, runs with a context of its own (context.Background() in
// ariga.io/atlas/sql/postgres.Open and its diff): they cannot carry a
// forced route. They read server settings and compare expressions, which
// a replica answers as well as the primary.
func withContext(events []pgrouted.RouteEvent) []pgrouted.RouteEvent {
	var out []pgrouted.RouteEvent
	for _, e := range events {
		if e.Op == pgrouted.OpRead && !e.Primary && (strings.Contains(e.Query, "current_setting('server_version_num')") || strings.HasPrefix(e.Query, "SELECT ") && !strings.Contains(e.Query, "FROM")) {
			continue
		}
		out = append(out, e)
	}
	return out
}

func TestCRUD(t *testing.T) {
	defer clustertest.Guard(t)
	client, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	mark := rec.Mark()
	u, err := client.User.Create().SetName("ada").Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "Create", rec.Since(mark))
	got, err := client.User.Get(ctx, u.ID)
	clustertest.Fresh(t, err == nil && got.Name == "ada", "read after create: %v, %v", got, err)

	clustertest.WaitReplicaRoute(t, conn)
	mark = rec.Mark()
	all, err := client.User.Query().Where(user.Name("ada")).All(ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("query: %v %v", all, err)
	}
	clustertest.OnReplicas(t, "Query once the replicas hold the write", rec.Since(mark))

	mark = rec.Mark()
	if err := client.User.UpdateOne(u).SetName("ada lovelace").AddBalance(10).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "UpdateOne", rec.Since(mark))
	got, err = client.User.Get(ctx, u.ID)
	clustertest.Fresh(t, err == nil && got.Name == "ada lovelace" && got.Balance == 10, "read after update: %v, %v", got, err)
	mark = rec.Mark()
	if err := client.User.DeleteOne(u).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "DeleteOne", rec.Since(mark))
	_, err = client.User.Get(ctx, u.ID)
	clustertest.Fresh(t, entdb.IsNotFound(err), "read after delete: %v", err)
}

// TestTransactions: client.Tx and savepoints (ent has no nested
// transactions: a savepoint is raw SQL on the Tx) on the primary; a
// read-only transaction on a replica.
func TestTransactions(t *testing.T) {
	defer clustertest.Guard(t)
	client, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	mark := rec.Mark()
	tx, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := tx.User.Create().SetName("owner").Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT draft"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Post.Create().SetTitle("rolled back").SetAuthor(owner).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT draft"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Post.Create().SetTitle("kept").SetAuthor(owner).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if node, rec := where(t, ctx, tx); rec || node != "node0" {
		t.Errorf("a read in a transaction ran on %s", node)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "transaction with a savepoint", rec.Since(mark))
	titles, err := client.User.QueryPosts(owner).Select("title").Strings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, len(titles) == 1 && titles[0] == "kept", "after commit: %q, want [kept]", titles)

	clustertest.WaitReplicaRoute(t, conn)
	ro, err := client.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Rollback()
	if node, rec := where(t, ctx, ro); !rec || !clustertest.IsReplica(node) {
		t.Errorf("a read-only transaction ran on %s", node)
	}
	n, err := ro.User.QueryPosts(owner).Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, n == 1, "read-only transaction on a replica: %d posts, want 1", n)
}

// TestAssociationsAndPagination: eager loading with WithPosts, edge
// traversal and pages, on replicas once they hold the writes.
func TestAssociationsAndPagination(t *testing.T) {
	defer clustertest.Guard(t)
	client, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	var ids []int
	for i := 0; i < 7; i++ {
		u, err := client.User.Create().SetName("u").Save(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, u.ID)
		err = client.Post.CreateBulk(
			client.Post.Create().SetTitle("a").SetAuthor(u),
			client.Post.Create().SetTitle("b").SetAuthor(u),
		).Exec(ctx)
		if err != nil {
			t.Fatal(err)
		}
	}
	clustertest.WaitReplicaRoute(t, conn)
	mark := rec.Mark()
	users, err := client.User.Query().WithPosts().Order(user.ByID()).All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ok := len(users) == 7
	for _, u := range users {
		ok = ok && len(u.Edges.Posts) == 2
	}
	clustertest.Fresh(t, ok, "WithPosts: %d users", len(users))
	authors, err := client.User.Query().Where(user.HasPostsWith()).IDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, len(authors) == 7, "HasPosts: %d users", len(authors))
	var listed []int
	for offset := 0; ; offset += 3 {
		page, err := client.User.Query().Order(user.ByID()).Offset(offset).Limit(3).IDs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, page...)
		if len(page) < 3 {
			break
		}
	}
	clustertest.Fresh(t, len(listed) == 7 && listed[0] == ids[0] && listed[6] == ids[6], "pages: %v", listed)
	clustertest.OnReplicas(t, "eager loading and pagination", rec.Since(mark))
}

// TestUpsertReturning: OnConflictColumns (sql/upsert) runs INSERT ... ON
// CONFLICT ... RETURNING on the primary.
func TestUpsertReturning(t *testing.T) {
	defer clustertest.Guard(t)
	client, _, rec := open(t)
	ctx := clustertest.Ctx(t)
	mark := rec.Mark()
	var ids []int
	for _, name := range []string{"grace", "grace hopper"} {
		id, err := client.User.Create().SetName(name).SetEmail("grace@example.com").
			OnConflictColumns(user.FieldEmail).UpdateName().ID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if ids[0] == 0 || ids[0] != ids[1] {
		t.Errorf("upserts returned ids %v", ids)
	}
	events := rec.Since(mark)
	clustertest.OnPrimary(t, "upserts", events)
	if len(clustertest.Matching(events, "ON CONFLICT", "RETURNING")) != 2 {
		t.Errorf("no INSERT ... ON CONFLICT ... RETURNING seen: %+v", events)
	}
	got, err := client.User.Get(ctx, ids[0])
	clustertest.Fresh(t, err == nil && got.Name == "grace hopper", "read after upsert: %v, %v", got, err)
}

// TestLocking: ForUpdate (sql/lock) in a transaction, and ForShare outside
// one, run on the primary.
func TestLocking(t *testing.T) {
	defer clustertest.Guard(t)
	client, _, rec := open(t)
	ctx := clustertest.Ctx(t)
	u, err := client.User.Create().SetName("locked").SetBalance(100).Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mark := rec.Mark()
	tx, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := tx.User.Query().Where(user.ID(u.ID)).ForUpdate().Only(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.User.UpdateOne(cur).SetBalance(cur.Balance - 30).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	events := rec.Since(mark)
	clustertest.OnPrimary(t, "ForUpdate in a transaction", events)
	if len(clustertest.Matching(events, "FOR UPDATE")) != 1 {
		t.Errorf("no FOR UPDATE seen: %+v", events)
	}
	mark = rec.Mark()
	cur, err = client.User.Query().Where(user.ID(u.ID)).ForShare().Only(ctx)
	if err != nil {
		t.Fatal(err)
	}
	events = rec.Since(mark)
	clustertest.OnPrimary(t, "ForShare outside a transaction", events)
	if len(events) != 1 || events[0].Op != pgrouted.OpLock {
		t.Errorf("ForShare: %+v", events)
	}
	clustertest.Fresh(t, cur.Balance == 70, "balance after the locked update: %d, want 70", cur.Balance)
}

// TestRawSQL: the client's QueryContext and ExecContext (sql/execquery).
func TestRawSQL(t *testing.T) {
	defer clustertest.Guard(t)
	client, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	mark := rec.Mark()
	if _, err := client.ExecContext(ctx, "INSERT INTO users (name, balance) VALUES ($1, 1), ($2, 2)", "x", "y"); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "ExecContext", rec.Since(mark))
	sum, err := client.User.Query().Aggregate(entdb.Sum(user.FieldBalance)).Int(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, sum == 3, "sum after raw insert: %d, want 3", sum)
	clustertest.WaitReplicaRoute(t, conn)
	mark = rec.Mark()
	if node, r := where(t, ctx, client); !r || !clustertest.IsReplica(node) {
		t.Errorf("raw read ran on %s", node)
	}
	clustertest.OnReplicas(t, "raw read", rec.Since(mark))
	if node, r := where(t, ctx, primaryComment{client}); r || node != "node0" {
		t.Errorf("/* pgrouted:primary */ raw read ran on %s", node)
	}
}

// primaryComment prefixes raw reads with the routing comment.
type primaryComment struct{ q querier }

func (p primaryComment) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return p.q.QueryContext(ctx, "/* pgrouted:primary */ "+query, args...)
}

// TestForcedRouting: the route travels in the context of every ent call.
func TestForcedRouting(t *testing.T) {
	defer clustertest.Guard(t)
	client, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	u, err := client.User.Create().SetName("forced").Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mark := rec.Mark()
	got, err := ReadFromPrimary(ctx, client, u.ID)
	clustertest.Fresh(t, err == nil && got.Name == "forced", "forced primary read: %v, %v", got, err)
	if node, r := where(t, pgrouted.WithRoute(ctx, pgrouted.Primary), client); r || node != "node0" {
		t.Errorf("WithRoute(Primary) raw read ran on %s", node)
	}
	events := rec.Since(mark)
	clustertest.OnPrimary(t, "WithRoute(Primary)", events)
	for _, e := range events {
		if e.Reason != pgrouted.ReasonForced {
			t.Errorf("%q: reason %s, want forced", e.Query, e.Reason)
		}
	}
	clustertest.WaitReplicaRoute(t, conn)
	replica := pgrouted.WithRoute(ctx, pgrouted.Replica)
	if n, err := client.User.Query().Count(replica); err != nil || n != 1 {
		t.Errorf("count forced to a replica: %d, %v", n, err)
	}
	if _, err := client.User.Create().SetName("never").Save(replica); !errors.Is(err, pgrouted.ErrWriteOnReplica) {
		t.Errorf("Create forced to a replica: %v, want ErrWriteOnReplica", err)
	}
}
