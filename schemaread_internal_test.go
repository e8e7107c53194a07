package pgrouted

import (
	"context"
	"testing"

	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

// TestSchemaReadDecision: the reads of the migration tools' version tables
// and of the catalogs are planned for the primary (reason forced), as a
// read with /* pgrouted:primary */ is, whatever the replicas' state; other
// reads are left to the replica path, and a routing comment still wins.
func TestSchemaReadDecision(t *testing.T) {
	fns := sqlclass.NewFunctions(nil, nil, nil)
	c := &Connector{}
	for _, q := range []string{
		`SELECT version_id, is_applied from goose_db_version ORDER BY id DESC`, // goose
		`SELECT version, dirty FROM "public"."schema_migrations" LIMIT 1`,      // golang-migrate
		`SELECT table_name FROM information_schema.tables WHERE table_schema = (SELECT current_schema()) AND table_type = 'BASE TABLE'`,
		`SELECT EXISTS ( SELECT 1 FROM pg_tables WHERE tablename = 'goose_db_version' )`,
	} {
		r := classifyText(q, fns)
		var p plan
		c.plan(context.Background(), &request{r: r}, false, &p)
		if !p.primary || p.reason != ReasonForced || p.op != OpRead || p.pin {
			t.Errorf("%s: planned %+v; want a read on the primary, forced, no pin", q, p)
		}
	}
	for _, q := range []string{
		`SELECT * FROM users`,
		`SELECT * FROM users WHERE name = 'schema_migrations'`,
		`/* pgrouted:replica */ SELECT * FROM pg_stat_activity`,
	} {
		if r := classifyText(q, fns); r.Hint == sqlclass.HintPrimary {
			t.Errorf("%s: hint %v; want it left to the replica path", q, r.Hint)
		}
	}
	if r := classifyText(`INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, $2)`, fns); r.Class != sqlclass.Write || r.Hint != sqlclass.NoHint {
		t.Errorf("a write to the version table: %+v", r)
	}
}
