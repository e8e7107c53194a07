package sqlclass_test

import (
	"fmt"

	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

func ExampleClassify() {
	for _, q := range []string{
		`SELECT * FROM "users" WHERE "id" = $1`,
		`SELECT * FROM "jobs" WHERE "state" = 'queued' LIMIT 1 FOR UPDATE SKIP LOCKED`,
		`WITH d AS (DELETE FROM "sessions" RETURNING *) SELECT count(*) FROM d`,
		`SELECT pg_advisory_lock(42)`,
		`/* pgrouted:primary */ SELECT balance FROM accounts WHERE id = $1`,
		`BEGIN; UPDATE t SET a = 1; COMMIT`,
	} {
		r := sqlclass.Classify(q)
		fmt.Println(r.Class, r.Hint, r.Statements)
	}
	// Output:
	// read none 1
	// lock none 1
	// write none 1
	// session none 1
	// read primary 1
	// tx none 3
}
