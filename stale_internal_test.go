package pgrouted

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestStaleStatement(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "0A000", Message: "cached plan must not change result type"}, true},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "0A000", Message: "cached plan must not change result type"}), true},
		{&pgconn.PgError{Code: "08P01", Message: "bind message has 8 result formats but query has 12 columns"}, true},
		{&pgconn.PgError{Code: "26000", Message: `prepared statement "stmtcache_1" does not exist`}, true},
		// Raised by a function: it may have done anything before.
		{&pgconn.PgError{Code: "0A000", Message: "cached plan must not change result type", Where: "PL/pgSQL function f() line 3 at RAISE"}, false},
		{&pgconn.PgError{Code: "0A000", Message: "FOR UPDATE is not allowed with aggregate functions"}, false},
		{&pgconn.PgError{Code: "08P01", Message: "bind message supplies 1 parameters, but prepared statement \"\" requires 2"}, false},
		{&pgconn.PgError{Code: "26000", Message: "no such thing"}, false},
		{&pgconn.PgError{Code: "42P01", Message: `relation "t" does not exist`}, false},
		{errors.New("cached plan must not change result type"), false},
		{nil, false},
	} {
		if got := staleStatement(c.err); got != c.want {
			t.Errorf("staleStatement(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A description lookup is on every pipelined statement's path: it takes
// no lock and allocates nothing.
func TestDescCacheGetDoesNotAllocate(t *testing.T) {
	var d descCache
	q := fmt.Sprintf("SELECT * FROM t WHERE id = $%d", 1)
	d.put(q, &pgconn.StatementDescription{SQL: q})
	if n := testing.AllocsPerRun(1000, func() {
		if d.get(q) == nil {
			t.Fatal("the description is not found")
		}
	}); n != 0 {
		t.Errorf("descCache.get allocates %v times per call", n)
	}
}
