package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/testcluster"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// cluster is a primary (node0) with two streaming replicas, shared by the
// package's tests.
var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(testcluster.Run(testcluster.Options{
		Replicas: 2,
		Logf:     func(f string, a ...any) { fmt.Fprintf(os.Stderr, "testcluster: "+f+"\n", a...) },
	}, func(c *testcluster.Cluster) int {
		cluster = c
		return m.Run()
	}))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// recorder keeps every RouteEvent of a connector.
type recorder struct {
	mu     sync.Mutex
	events []pgrouted.RouteEvent
}

func (r *recorder) record(e pgrouted.RouteEvent) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// matching returns the events whose query holds part.
func (r *recorder) matching(part string) []pgrouted.RouteEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []pgrouted.RouteEvent
	for _, e := range r.events {
		if strings.Contains(e.Query, part) {
			out = append(out, e)
		}
	}
	return out
}

// process opens a *sql.DB through a new Connector, as a process that just
// started would: it has no read-your-writes position and no session state.
// It waits until a plain read goes to a replica. The staleness budget is a
// size (1GB) that the paused replicas stay far inside, so that any read the
// driver lets go to a replica does go there, whatever the default budget.
func process(t *testing.T) (*sql.DB, *pgrouted.Connector, *recorder) {
	t.Helper()
	cfg, err := pgrouted.ParseConfig(cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_max_lag=1GB")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	cfg.OnRoute = rec.record
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	deadline := time.Now().Add(45 * time.Second)
	for {
		d, err := conn.Explain(context.Background(), "SELECT 1")
		if err == nil && !d.Primary && conn.Topology().Primary != "" {
			return db, conn, rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("reads do not go to a replica: %+v, %v", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// applied returns how many times each migration ran, from the log table on
// the primary.
func applied(t *testing.T, ctx context.Context, table string) map[int]int {
	t.Helper()
	c, err := cluster.Primary().Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT v, count(*) FROM "+table+" GROUP BY v")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[int]int{}
	for rows.Next() {
		var v, n int
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		got[v] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// freshProcessUp is the scenario for one tool: a first process applies
// migration 1, the replicas replay it and stop replaying, a second process
// applies migration 2, and a third, fresh, process runs up while the
// replicas still hold version 1 only. Every migration must have run once,
// and the fresh process's reads of the version table (versionTable) must
// have gone to the primary.
func freshProcessUp(t *testing.T, logTable, versionTable string, up func(ctx context.Context, db *sql.DB, version int) error) {
	ctx := testCtx(t)
	primary := cluster.Primary()
	if err := primary.Exec(ctx, "DROP TABLE IF EXISTS "+logTable+", "+versionTable); err != nil {
		t.Fatal(err)
	}
	db1, _, _ := process(t)
	if err := up(ctx, db1, 1); err != nil {
		t.Fatalf("up to 1: %v", err)
	}
	if err := cluster.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range cluster.Replicas() {
		if err := r.PauseReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, r := range cluster.Replicas() {
			if err := r.ResumeReplay(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	db2, _, _ := process(t)
	if err := up(ctx, db2, 2); err != nil {
		t.Fatalf("up to 2: %v", err)
	}

	db3, _, rec := process(t)
	// The replicas really lag, and this process's reads go to them: a
	// plain read of the log sees migration 1 only, on a replica.
	var n int
	if err := db3.QueryRowContext(ctx, "SELECT count(*) FROM "+logTable).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if evs := rec.matching("FROM " + logTable); n != 1 || len(evs) != 1 || evs[0].Primary {
		t.Fatalf("a plain read of %s saw %d rows (events %+v): the replicas should serve it, one row behind", logTable, n, evs)
	}
	if err := up(ctx, db3, 0); err != nil {
		t.Fatalf("up from a fresh process: %v", err)
	}
	if got := applied(t, ctx, logTable); len(got) != 3 || got[1] != 1 || got[2] != 1 || got[3] != 1 {
		t.Fatalf("migrations applied (version: times) %v; want each of 1, 2, 3 once", got)
	}
	reads := rec.matching(versionTable)
	if len(reads) == 0 {
		t.Fatalf("no statement of the fresh process named %s", versionTable)
	}
	for _, e := range reads {
		if !e.Primary {
			t.Errorf("the fresh process read the version table on %s (%s): %q", e.Endpoint, e.Reason, e.Query)
		}
	}
}

func TestGooseFreshProcess(t *testing.T) {
	freshProcessUp(t, "goose_log", "goose_db_version", func(ctx context.Context, db *sql.DB, v int) error {
		return GooseUp(ctx, db, int64(v))
	})
}

func TestGooseLegacyFreshProcess(t *testing.T) {
	freshProcessUp(t, "goose_log", "goose_db_version", func(ctx context.Context, db *sql.DB, v int) error {
		return GooseUpLegacy(ctx, db, int64(v))
	})
}

func TestMigrateFreshProcess(t *testing.T) {
	freshProcessUp(t, "migrate_log", "schema_migrations", func(_ context.Context, db *sql.DB, v int) error {
		return MigrateUp(db, uint(v))
	})
}

// TestGooseLockedFreshProcess: goose's Provider with its Postgres session
// locker, which holds an advisory lock on the connection it reads the
// version table with.
func TestGooseLockedFreshProcess(t *testing.T) {
	freshProcessUp(t, "goose_log", "goose_db_version", func(ctx context.Context, db *sql.DB, v int) error {
		fsys, err := fs.Sub(gooseFiles, "goose")
		if err != nil {
			return err
		}
		l, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return err
		}
		p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithSessionLocker(l))
		if err != nil {
			return err
		}
		if v == 0 {
			_, err = p.Up(ctx)
		} else {
			_, err = p.UpTo(ctx, int64(v))
		}
		return err
	})
}
