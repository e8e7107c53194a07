package pgrouted

import "github.com/pgrouted/pgrouted/internal/sqlclass"

// This file sends to the primary the reads whose answer decides a schema
// change: a migration tool's version table (goose_db_version,
// schema_migrations) and the system catalogs (information_schema,
// pg_catalog). A tool started in a fresh process holds no read-your-writes
// position; on a replica that has not replayed the last migrations it would
// apply one again, skip one, or issue DDL that fails. The primary is
// always current, and these reads are rare. A leading
// /* pgrouted:replica */ keeps such a read on a replica. See
// docs/migrations.md.

// classifyText classifies query under the function catalog fns, as
// sqlclass.ClassifyWith does, and gives a schema read (see
// sqlclass.SchemaRead) that has no routing comment of its own the route
// of /* pgrouted:primary */: the primary, reason ReasonForced.
func classifyText(query string, fns *sqlclass.Functions) sqlclass.Result {
	r := sqlclass.ClassifyWith(query, fns)
	if r.Class == sqlclass.Read && r.Hint == sqlclass.NoHint && sqlclass.SchemaRead(query) {
		r.Hint = sqlclass.HintPrimary
	}
	return r
}
