package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/examples/internal/clustertest"
	"github.com/pgrouted/pgrouted/examples/sqlc/db"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// open opens a Pool on an empty database with the example's schema, with
// a recorder, and waits until reads go to the replicas.
func open(t *testing.T, extra ...string) (Store, *clustertest.Recorder) {
	t.Helper()
	migrate := clustertest.Clean(t, "users", "posts")
	rec := &clustertest.Recorder{}
	p, err := OpenPool(clustertest.Ctx(t), clustertest.DSN(extra...), rec.Record)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	clustertest.WaitCatalog(t, p.Connector())
	if migrate {
		if _, err := p.Exec(clustertest.Ctx(t), Schema); err != nil {
			t.Fatal(err)
		}
		clustertest.Migrated()
	}
	clustertest.WaitReplicaRoute(t, p.Connector())
	return NewStore(p), rec
}

// where names the node that ran sqlc's WhereAmI through q.
func where(t *testing.T, ctx context.Context, q *db.Queries) (node string, inRecovery bool) {
	t.Helper()
	r, err := q.WhereAmI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return clustertest.NodeByPort(t, int(r.Port)), r.InRecovery
}

// TestWorkload: the shared workload through sqlc's code on the Pool, with
// replication delayed: zero stale reads, and replicas serve the reads made
// a while after the writes.
func TestWorkload(t *testing.T) {
	defer clustertest.Guard(t)
	s, rec := open(t)
	clustertest.Workload(t, s, s.Pool.Connector(), rec)
}

// TestReadsOnReplicas: sqlc's reads run on the replicas, as the servers
// themselves say.
func TestReadsOnReplicas(t *testing.T) {
	defer clustertest.Guard(t)
	s, _ := open(t)
	ctx := clustertest.Ctx(t)
	on := map[string]int{}
	for i := 0; i < 50; i++ {
		node, inRecovery := where(t, ctx, s.Q)
		if !inRecovery {
			t.Fatalf("a plain read ran on %s, out of recovery", node)
		}
		on[node]++
	}
	t.Logf("50 reads ran on %v", on)
}

// TestTransactions: a transfer in a transaction on the primary, read back
// at once; the balances in a read-only transaction on a replica; CopyFrom
// and a batch of writes, read back at once.
func TestTransactions(t *testing.T) {
	defer clustertest.Guard(t)
	s, rec := open(t)
	ctx := clustertest.Ctx(t)
	a, err := s.CreateUser(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateUser(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	mark := rec.Mark()
	if err := s.Transfer(ctx, a, b, 30); err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "the transfer", rec.Since(mark))
	ua, err := s.Q.GetUser(ctx, a)
	if err != nil || ua.Balance != -30 {
		t.Fatalf("a's balance read back at once: %d, %v; want -30", ua.Balance, err)
	}
	clustertest.WaitReplicaRoute(t, s.Pool.Connector())
	mark = rec.Mark()
	ba, bb, err := s.Balances(ctx, a, b)
	if err != nil || ba != -30 || bb != 30 {
		t.Fatalf("balances in a read-only transaction: %d, %d, %v; want -30, 30", ba, bb, err)
	}
	ev := rec.Since(mark)
	if len(ev) == 0 || ev[0].Primary || ev[0].Reason != pgrouted.ReasonReadOnlyTx {
		t.Fatalf("the read-only transaction began as %+v, want on a replica", ev)
	}
	for _, e := range ev {
		if e.Primary {
			t.Fatalf("a statement of the read-only transaction ran on the primary: %+v", e)
		}
	}

	var users []db.CopyUsersParams
	for i := 0; i < 100; i++ {
		users = append(users, db.CopyUsersParams{Name: fmt.Sprintf("copied-%d", i), Balance: 1})
	}
	if n, err := s.CopyUsers(ctx, users); err != nil || n != 100 {
		t.Fatalf("CopyUsers: %d, %v", n, err)
	}
	if n, err := s.Count(ctx); err != nil || n != 102 {
		t.Fatalf("users counted at once after the copy: %d, %v; want 102", n, err)
	}
	var posts []db.AddPostsParams
	for i := 0; i < 5; i++ {
		posts = append(posts, db.AddPostsParams{UserID: a, Title: fmt.Sprintf("p%d", i)})
	}
	s.Q.AddPosts(ctx, posts).Exec(func(i int, err error) {
		if err != nil {
			t.Errorf("batch item %d: %v", i, err)
		}
	})
	if titles, err := s.Q.PostTitles(ctx, a); err != nil || len(titles) != 5 {
		t.Fatalf("the batch's posts read back at once: %q, %v", titles, err)
	}
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
		"write on node0 (write): -- name: CreateUser :one",
		"write on node0 (write): COPY \"users\"",
		`read back "ada" with 1 post(s); copied 2 users; 3 users`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
