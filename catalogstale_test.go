//go:build unix

package pgrouted_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// TestCatalogChangeOfItsOwnScopesEveryRelation: after a statement through
// the connector changes the catalog, and until a snapshot read after it is
// in, the relations a statement writes and reads cannot be told from the
// snapshot (catalog.stale). Two tables the snapshot knows, neither
// referencing the other; through the connector, one gets a foreign key
// that cascades from the other, and a view over it is made. With the
// replicas paused after that, a DELETE of the referenced row deletes the
// referencing row too:
//   - read through the view while the snapshot is stale, the view is a name
//     it does not know, read only by its name: the read must need every
//     relation's writes;
//   - read from the referencing table once a new snapshot is in, the
//     DELETE must have counted for every relation, not its own table only.
//
// Both reads then go to the primary and find no row; a replica would
// serve the deleted one (GORM's TestForeignKeyConstraintsBelongsTo saw
// it once in nine runs).
func TestCatalogChangeOfItsOwnScopesEveryRelation(t *testing.T) {
	forEachClient(t, testCatalogChangeScopes)
}

func testCatalogChangeScopes(t *testing.T, open opener) {
	ctx := testCtx(t)
	restore(t)
	p := cluster.Primary()
	mustExec(t, ctx, p, `DROP VIEW IF EXISTS catstale_v; DROP TABLE IF EXISTS catstale_members, catstale_profiles;
CREATE TABLE catstale_profiles (id int PRIMARY KEY);
CREATE TABLE catstale_members (id int PRIMARY KEY, profile int);
INSERT INTO catstale_profiles VALUES (1); INSERT INTO catstale_members VALUES (1, 1)`)
	t.Cleanup(func() {
		_ = p.Exec(context.Background(), "DROP VIEW IF EXISTS catstale_v; DROP TABLE IF EXISTS catstale_members, catstale_profiles")
	})
	replicated(t, ctx)
	db, conn, rec := open(t)
	// A Session's writes read their position at once (none is left to
	// the next read, which would need it whatever the relations).
	ctx = pgrouted.WithSession(ctx, pgrouted.NewSession())
	for deadline := time.Now().Add(60 * time.Second); conn.Stats().CatalogReads == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no catalog read after 60 s")
		}
	}
	release := pgrouted.HoldCatalogLoads(conn)
	defer release()
	for _, q := range []string{
		"ALTER TABLE catstale_members ADD FOREIGN KEY (profile) REFERENCES catstale_profiles (id) ON DELETE CASCADE",
		"CREATE VIEW catstale_v AS SELECT id FROM catstale_members",
	} {
		if err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	replicated(t, ctx)
	for _, r := range cluster.Replicas() {
		if err := r.PauseReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.ExecContext(ctx, "DELETE FROM catstale_profiles WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	check := func(read, when string) {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, read).Scan(&n); err != nil {
			t.Fatal(err)
		}
		ev := lastEvent(t, rec, read)
		if n != 0 || !ev.Primary {
			t.Errorf("%s: %q read %d rows on %s (%s), want the primary's 0: the replicas, paused before the DELETE, lack it", when, read, n, ev.Endpoint, ev.Reason)
		}
	}
	check("SELECT count(*) FROM catstale_v WHERE id = 1", "the snapshot stale")
	reads := conn.Stats().CatalogReads
	release()
	for deadline := time.Now().Add(60 * time.Second); conn.Stats().CatalogReads == reads; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no catalog read 60 s after the loads were let go")
		}
	}
	check("SELECT count(*) FROM catstale_members WHERE id = 1", "a new snapshot in")
}
