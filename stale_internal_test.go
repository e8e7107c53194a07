package pgrouted

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// The refusals below were provoked on PostgreSQL 15 (lc_messages C and
// de_DE.UTF-8) and copied field for field: the server names the routine
// that raised them whatever the language of its messages.
var (
	cachedPlan = func(msg string) *pgconn.PgError {
		return &pgconn.PgError{Code: "0A000", Message: msg, File: "plancache.c", Line: 722, Routine: "RevalidateCachedQuery"}
	}
	resultFormats08P01 = func(msg string) *pgconn.PgError {
		return &pgconn.PgError{Code: "08P01", Message: msg, File: "pquery.c", Line: 639, Routine: "PortalSetResultFormat"}
	}
	missingStatement = func(msg string) *pgconn.PgError {
		return &pgconn.PgError{Code: "26000", Message: msg, File: "prepare.c", Line: 451, Routine: "FetchPreparedStatement"}
	}
)

func TestStaleStatement(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		// 0A000: a prepared statement whose result columns changed.
		{"0A000", cachedPlan("cached plan must not change result type"), true},
		{"0A000 de", cachedPlan("gecachter Plan darf den Ergebnistyp nicht ändern"), true},
		{"0A000 wrapped", fmt.Errorf("wrapped: %w", cachedPlan("cached plan must not change result type")), true},
		// 08P01: a Bind with the result formats of a stale description.
		{"08P01", resultFormats08P01("bind message has 2 result formats but query has 3 columns"), true},
		{"08P01 de", resultFormats08P01("Bind-Message hat 2 Ergebnisspalten, aber Anfrage hat 3 Spalten"), true},
		// 26000: pgx's cached statement is gone from the session.
		{"26000", missingStatement(`prepared statement "stmtcache_1" does not exist`), true},
		{"26000 de", missingStatement("vorbereitete Anweisung »stmtcache_1« existiert nicht"), true},
		// No routine (a pooler's or another server's error): the English
		// message.
		{"0A000 no routine", &pgconn.PgError{Code: "0A000", Message: "cached plan must not change result type"}, true},
		{"08P01 no routine", &pgconn.PgError{Code: "08P01", Message: "bind message has 8 result formats but query has 12 columns"}, true},
		{"26000 no routine", &pgconn.PgError{Code: "26000", Message: `prepared statement "stmtcache_1" does not exist`}, true},
		// Raised by a function: it may have done anything before.
		{"RAISE", &pgconn.PgError{Code: "0A000", Message: "cached plan must not change result type", Routine: "exec_stmt_raise", File: "pl_exec.c",
			Where: "PL/pgSQL function inline_code_block line 1 at RAISE"}, false},
		{"RAISE no routine", &pgconn.PgError{Code: "0A000", Message: "cached plan must not change result type", Where: "PL/pgSQL function f() line 3 at RAISE"}, false},
		// The same codes for other reasons.
		{"0A000 other", &pgconn.PgError{Code: "0A000", Message: "FOR UPDATE is not allowed with aggregate functions", Routine: "CheckSelectLocking"}, false},
		{"0A000 other, English text", &pgconn.PgError{Code: "0A000", Message: "cached plan must not change result type", Routine: "CheckSelectLocking"}, false},
		{"08P01 other", &pgconn.PgError{Code: "08P01", Message: `bind message supplies 1 parameters, but prepared statement "" requires 2`, Routine: "exec_bind_message"}, false},
		{"08P01 other no routine", &pgconn.PgError{Code: "08P01", Message: `bind message supplies 1 parameters, but prepared statement "" requires 2`}, false},
		{"26000 no routine other", &pgconn.PgError{Code: "26000", Message: "no such thing"}, false},
		{"42P01", &pgconn.PgError{Code: "42P01", Message: `relation "t" does not exist`, Routine: "parserOpenTable"}, false},
		{"not a PgError", errors.New("cached plan must not change result type"), false},
		{"nil", nil, false},
	} {
		if got := staleStatement(c.err); got != c.want {
			t.Errorf("%s: staleStatement(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

func TestStaleParams(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		// 42804: a parameter assigned to a retyped column.
		{"42804", &pgconn.PgError{Code: "42804", Message: `column "v" is of type date but expression is of type text`, File: "parse_target.c", Routine: "transformAssignedExpr"}, true},
		{"42804 de", &pgconn.PgError{Code: "42804", Message: "Spalte »v« hat Typ date, aber der Ausdruck hat Typ text", File: "parse_target.c", Routine: "transformAssignedExpr"}, true},
		// 42883: a parameter compared with a retyped column.
		{"42883", &pgconn.PgError{Code: "42883", Message: "operator does not exist: text = integer", File: "parse_oper.c", Routine: "op_error"}, true},
		{"42883 de", &pgconn.PgError{Code: "42883", Message: "Operator existiert nicht: text = integer", File: "parse_oper.c", Routine: "op_error"}, true},
		// The same codes elsewhere.
		{"42804 in a function", &pgconn.PgError{Code: "42804", Routine: "transformAssignedExpr", Where: "SQL function \"f\" during startup"}, false},
		{"42883 function", &pgconn.PgError{Code: "42883", Message: "function nosuch(integer) does not exist", Routine: "ParseFuncOrColumn"}, false},
		{"42804 no routine", &pgconn.PgError{Code: "42804", Message: `column "v" is of type date but expression is of type text`}, false},
		{"0A000", cachedPlan("cached plan must not change result type"), false},
	} {
		if got := staleParams(c.err); got != c.want {
			t.Errorf("%s: staleParams(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
