package pgrouted

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestWithPoolerHint(t *testing.T) {
	exists := &pgconn.PgError{Code: "42P05", Message: `prepared statement "stmtcache_0123abcd" already exists`}
	missing := &pgconn.PgError{Code: "26000", Message: `prepared statement "stmtcache_0123abcd" does not exist`}
	for _, c := range []struct {
		err  error
		hint bool
	}{
		{exists, true},
		{missing, true},
		{fmt.Errorf("wrapped: %w", exists), true},
		// Statements the application named (PREPARE, EXECUTE): its own.
		{&pgconn.PgError{Code: "42P05", Message: `prepared statement "mine" already exists`}, false},
		{&pgconn.PgError{Code: "26000", Message: `prepared statement "mine" does not exist`}, false},
		{&pgconn.PgError{Code: "42P01", Message: `relation "stmtcache_x" does not exist`}, false},
		{errors.New(`prepared statement "stmtcache_1" already exists`), false},
		{nil, false},
	} {
		got := withPoolerHint(c.err)
		if !c.hint {
			if got != c.err {
				t.Errorf("withPoolerHint(%v) = %v, want it unchanged", c.err, got)
			}
			continue
		}
		var pe *pgconn.PgError
		if !strings.HasSuffix(got.Error(), poolerHint) || !strings.Contains(got.Error(), c.err.Error()) || !errors.As(got, &pe) {
			t.Errorf("withPoolerHint(%v) = %v, want the error, the hint, and the *pgconn.PgError underneath", c.err, got)
		}
		if again := withPoolerHint(got); again != got {
			t.Errorf("the hint was added twice: %v", again)
		}
	}
	// A statement the server refused for want of pgx's cached statement is
	// also a stale statement (stale.go runs it again first); the hint
	// comes with the final error, and does not hide it from staleStatement.
	if !staleStatement(withPoolerHint(missing)) {
		t.Error("staleStatement does not see the 26000 under the hint")
	}
}
