package sqlclass

import (
	"strings"
	"testing"
)

// testFunctions is a catalog as a small database would have it: built-in
// functions, and user functions of every kind.
func testFunctions(t testing.TB, read, write []string) *Functions {
	t.Helper()
	var defs []FuncDef
	for _, n := range []string{"count", "now", "lower", "upper", "generate_series", "bernoulli",
		"system", "left", "varchar", "numeric", "unnest", "random", "current_schema", "format_type",
		"current_setting", "set_config", "nextval", "pg_advisory_lock", "sum", "max", "row_number",
		"extract", "substring", "position", "char", "timestamp", "gen_random_uuid", "clock_timestamp"} {
		defs = append(defs, FuncDef{Schema: "pg_catalog", Name: n, Volatile: n == "random" || n == "set_config"})
	}
	defs = append(defs,
		FuncDef{Schema: "information_schema", Name: "_pg_expandarray"},
		FuncDef{Schema: "app", Name: "set_tenant", Volatile: true},
		FuncDef{Schema: "public", Name: "tenant"},                        // STABLE
		FuncDef{Schema: "app", Name: "f"},                                // STABLE
		FuncDef{Schema: "other", Name: "f", Volatile: true},              // an overload elsewhere
		FuncDef{Schema: "public", Name: "lower", Volatile: true},         // shadows a built-in
		FuncDef{Schema: "public", Name: "lock_it", Volatile: true},       // pg_advisory_lock inside
		FuncDef{Schema: "public", Name: "ins", Volatile: true},           // an INSERT inside
		FuncDef{Schema: "public", Name: "jitter", Volatile: true},        // random() inside
		FuncDef{Schema: "public", Name: "p", Procedure: true},            // a procedure
		FuncDef{Schema: "public", Name: "MixedCase"},                     // STABLE, "MixedCase"
		FuncDef{Schema: "public", Name: "MixedVolatile", Volatile: true}, // VOLATILE
		FuncDef{Schema: "public", Name: "uuid_generate_v4", Volatile: true, Extension: "uuid-ossp"},
		FuncDef{Schema: "public", Name: "filter"}, // a user function named like a key word
	)
	parse := func(list []string) []FuncName {
		var out []FuncName
		for _, s := range list {
			n, err := ParseFuncName(s)
			if err != nil {
				t.Fatalf("ParseFuncName(%q): %v", s, err)
			}
			out = append(out, n)
		}
		return out
	}
	return NewFunctions(defs, parse(read), parse(write))
}

var functionTests = []struct {
	sql  string
	want Class
	v    FuncVerdict
	name string // the function named by the verdict
}{
	// Built-in functions: the curated list decides.
	{"SELECT count(*), now(), upper(name) FROM t", Read, FuncNone, ""},
	{"SELECT random(), clock_timestamp(), gen_random_uuid()", Read, FuncNone, ""},
	{"SELECT set_config('a.b', 'c', false)", Session, FuncNone, ""},
	{"SELECT nextval('s')", Write, FuncNone, ""},
	{"SELECT pg_catalog.current_setting('search_path')", Read, FuncNone, ""},
	{"SELECT * FROM information_schema._pg_expandarray(ARRAY[1])", Read, FuncNone, ""},

	// User functions: the catalog's volatility decides.
	{"SELECT app.set_tenant($1)", Session, FuncVolatile, "set_tenant"},
	{"SELECT set_tenant($1)", Session, FuncVolatile, "set_tenant"},
	{"select APP.SET_TENANT($1)", Session, FuncVolatile, "SET_TENANT"},
	{`SELECT "app"."set_tenant"($1)`, Session, FuncVolatile, "set_tenant"},
	{"SELECT tenant()", Read, FuncNone, ""},
	{"SELECT public.tenant()", Read, FuncNone, ""},
	{"SELECT app.f(1)", Read, FuncNone, ""},
	{"SELECT other.f(1)", Session, FuncVolatile, "f"},
	{"SELECT f(1)", Session, FuncVolatile, "f"},                   // every visible definition counts
	{"SELECT lower(name) FROM t", Session, FuncVolatile, "lower"}, // public.lower may be reached
	{"SELECT pg_catalog.lower(name) FROM t", Read, FuncNone, ""},
	{"SELECT lock_it(1)", Session, FuncVolatile, "lock_it"},
	{"SELECT * FROM ins(1)", Session, FuncVolatile, "ins"},
	{`SELECT "MixedCase"()`, Read, FuncNone, ""},
	{`SELECT mixedcase()`, Session, FuncUnknown, "mixedcase"},
	{`SELECT "MixedVolatile"()`, Session, FuncVolatile, "MixedVolatile"},
	{"SELECT uuid_generate_v4()", Read, FuncNone, ""},
	{"SELECT missing(1)", Session, FuncUnknown, "missing"},
	{"SELECT app.missing(1)", Session, FuncUnknown, "missing"},
	{"SELECT nosuchschema.tenant()", Session, FuncUnknown, "tenant"},
	{"SELECT 1 FROM t WHERE a = jitter()", Session, FuncVolatile, "jitter"},
	{"SELECT x FROM t WHERE id IN (SELECT id FROM u WHERE v = set_tenant('a'))", Session, FuncVolatile, "set_tenant"},
	{"SELECT tenant(), set_tenant('a'), missing()", Session, FuncVolatile, "set_tenant"},
	{"SELECT count(*) FILTER (WHERE a > 0) FROM t", Read, FuncNone, ""},

	// DML: a VOLATILE user function may change the session too.
	{"INSERT INTO t (a, b) VALUES (1, 2)", Write, FuncNone, ""},
	{`INSERT INTO "public"."t" ("a", "b") VALUES ($1, $2) RETURNING "id"`, Write, FuncNone, ""},
	{"INSERT INTO t AS x (a) VALUES (1) ON CONFLICT (a) DO UPDATE SET (a) = (2)", Write, FuncNone, ""},
	{"INSERT INTO t (a) VALUES (set_tenant('x'))", Session, FuncVolatile, "set_tenant"},
	{"UPDATE t SET a = tenant() WHERE id = 1", Write, FuncNone, ""},
	{"UPDATE t SET a = ins(1)", Session, FuncVolatile, "ins"},
	{"DELETE FROM t WHERE a = missing()", Session, FuncUnknown, "missing"},
	{"MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)", Write, FuncNone, ""},

	// Not function calls: syntax, aliases, type modifiers, CTE columns.
	{"SELECT * FROM t WHERE a IN (1, 2) AND EXISTS (SELECT 1) AND b = ANY (ARRAY[1])", Read, FuncNone, ""},
	{"SELECT coalesce(a, 0), nullif(b, 1), greatest(1, 2), least(1, 2) FROM t", Read, FuncNone, ""},
	{"SELECT CAST(x AS varchar(10)), x::numeric(10, 2), x::mytype(3) FROM t", Read, FuncNone, ""},
	{"SELECT extract(epoch FROM now()), substring(a FROM 1 FOR 2), position('a' IN b) FROM t", Read, FuncNone, ""},
	{"SELECT * FROM generate_series(1, 3) AS g(x)", Read, FuncNone, ""},
	{"SELECT * FROM generate_series(1, 3) g(x)", Read, FuncNone, ""},
	{"SELECT * FROM (SELECT 1) s(a)", Read, FuncNone, ""},
	{"SELECT * FROM t x(a, b), \"u\" y(c)", Read, FuncNone, ""},
	{"SELECT * FROM unnest(ARRAY[1]) WITH ORDINALITY AS u(v, n)", Read, FuncNone, ""},
	{"WITH x(a) AS (SELECT 1), y(b) AS MATERIALIZED (SELECT 2) SELECT * FROM x, y", Read, FuncNone, ""},
	{"WITH RECURSIVE t(n) AS (VALUES (1) UNION ALL SELECT n+1 FROM t WHERE n < 10) SELECT sum(n) FROM t", Read, FuncNone, ""},
	{"WITH x AS (SELECT 1) SELECT a, set_tenant('b') FROM x", Session, FuncVolatile, "set_tenant"},
	{"WITH x(a) AS (SELECT 1) SELECT * FROM x, ins(1)", Session, FuncVolatile, "ins"},
	{"SELECT * FROM (WITH y(b) AS (SELECT 1) SELECT * FROM y) z", Read, FuncNone, ""},
	{"SELECT * FROM unnest(ARRAY[1]) WITH ORDINALITY, missing(1)", Session, FuncUnknown, "missing"},
	{"SELECT a, row_number() OVER (PARTITION BY b ORDER BY c) FROM t WINDOW w AS (ORDER BY a)", Read, FuncNone, ""},
	{"SELECT a FROM t GROUP BY CUBE (a), ROLLUP (b), GROUPING SETS ((a), ())", Read, FuncNone, ""},
	{"SELECT * FROM t TABLESAMPLE bernoulli (10) REPEATABLE (42)", Read, FuncNone, ""},
	{"SELECT * FROM t ORDER BY a FETCH FIRST (5) ROWS ONLY", Read, FuncNone, ""},
	{"SELECT current_schema(), CURRENT_TIMESTAMP(3), left('abc', 1), ROW(1, 2)", Read, FuncNone, ""},
	{"SELECT * FROM t WHERE (a, b) IN (SELECT 1, 2) OR NOT (a = 1)", Read, FuncNone, ""},
	{"VALUES (1), (2)", Read, FuncNone, ""},

	// The syntax of PostgreSQL 16 to 18 around calls: a single colon is
	// no cast (JSON_OBJECT's key: value, an array slice); JSON_TABLE's
	// COLUMNS is syntax, its PASSING and DEFAULT take calls; NESTED and
	// PATH are never followed by a parenthesis, so nested(…) and path(…)
	// are calls; MERGE_ACTION() is syntax; RETURNING WITH (OLD AS o) too.
	{"SELECT JSON_OBJECT('a': ins(1))", Session, FuncVolatile, "ins"},
	{"SELECT JSON_OBJECT('a' VALUE set_tenant('x') ABSENT ON NULL WITH UNIQUE KEYS)", Session, FuncVolatile, "set_tenant"},
	{"SELECT JSON_OBJECTAGG(k : jitter()) FROM kv", Session, FuncVolatile, "jitter"},
	{"SELECT arr[1:jitter()] FROM t", Session, FuncVolatile, "jitter"},
	{"SELECT jt.* FROM docs, JSON_TABLE(docs.js, '$.items[*]' COLUMNS (n FOR ORDINALITY, name text PATH '$.name' DEFAULT 'x' ON EMPTY, NESTED PATH '$.tags[*]' COLUMNS (tag text PATH '$'))) AS jt", Read, FuncNone, ""},
	{"SELECT * FROM docs, JSON_TABLE(js, '$[*]' PASSING set_tenant('x') AS v COLUMNS (a int PATH '$.a')) jt", Session, FuncVolatile, "set_tenant"},
	{"SELECT JSON_VALUE(js, '$.a' RETURNING int DEFAULT missing() ON EMPTY ERROR ON ERROR) FROM docs", Session, FuncUnknown, "missing"},
	{"SELECT JSON_QUERY(js, '$.a' RETURNING jsonb WITH CONDITIONAL WRAPPER KEEP QUOTES ON SCALAR STRING EMPTY ARRAY ON EMPTY ERROR ON ERROR), JSON_EXISTS(js, '$.c'), JSON_SCALAR(1), JSON_SERIALIZE(js), JSON('{}') FROM docs", Read, FuncNone, ""},
	{"SELECT path(p), nested(1) FROM t", Session, FuncUnknown, "path"},
	{"MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN DELETE RETURNING merge_action(), t.*", Write, FuncNone, ""},
	{"MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET a = ins(s.a)", Session, FuncVolatile, "ins"},
	{"UPDATE t SET a = 1 RETURNING WITH (OLD AS o, NEW AS n) o.a, n.a", Write, FuncNone, ""},
	{"UPDATE t SET a = 1 RETURNING WITH (OLD AS o, NEW AS n) o.a, set_tenant(n.b)", Session, FuncVolatile, "set_tenant"},

	// Where calls are not judged: DDL and plain EXPLAIN.
	{"CREATE TABLE t (id int REFERENCES u(id), v numeric(10, 2))", Write, FuncNone, ""},
	{"EXPLAIN SELECT set_tenant('x')", Session, FuncVolatile, "set_tenant"},
	{"EXPLAIN ANALYZE SELECT set_tenant('x')", Session, FuncVolatile, "set_tenant"},

	// DO and CALL: their effects are not known.
	{"CALL p()", Session, FuncNone, ""},
	{"DO $$BEGIN PERFORM set_config('a.b', 'c', false); END$$", Session, FuncNone, ""},
}

func TestClassifyWith(t *testing.T) {
	fn := testFunctions(t, nil, nil)
	for _, tt := range functionTests {
		r := ClassifyWith(tt.sql, fn)
		if r.Class != tt.want || r.Func != tt.v || r.FuncName(tt.sql) != tt.name {
			t.Errorf("ClassifyWith(%q) = %v, %v %q; want %v, %v %q", tt.sql, r.Class, r.Func, r.FuncName(tt.sql), tt.want, tt.v, tt.name)
		}
		// The lexical classification never judges user functions, and a
		// catalog only ever makes a statement more dangerous.
		lex := Classify(tt.sql)
		if lex.Func != FuncNone {
			t.Errorf("Classify(%q).Func = %v", tt.sql, lex.Func)
		}
		if rank[r.Class] < rank[lex.Class] {
			t.Errorf("ClassifyWith(%q) = %v, less than Classify's %v", tt.sql, r.Class, lex.Class)
		}
	}
}

// TestKeywordNamedFunction: a key word before a parenthesis is syntax,
// unless the catalog knows a function of that name: then, conservatively,
// a call.
func TestKeywordNamedFunction(t *testing.T) {
	q := "SELECT count(*) FILTER (WHERE a > 0) FROM t"
	if r := ClassifyWith(q, NewFunctions(nil, nil, nil)); r.Class != Session || r.Func != FuncUnknown || r.FuncName(q) != "count" {
		t.Errorf("empty catalog: %v %v %q; want session, unknown count", r.Class, r.Func, r.FuncName(q))
	}
	fn := testFunctions(t, nil, nil)
	if r := ClassifyWith(q, fn); r.Class != Read {
		t.Errorf("catalog with a STABLE public.filter: %v %v, want read", r.Class, r.Func)
	}
	defs := []FuncDef{{Schema: "pg_catalog", Name: "count"}, {Schema: "public", Name: "filter", Volatile: true}}
	if r := ClassifyWith(q, NewFunctions(defs, nil, nil)); r.Class != Read {
		// A call never follows a closing parenthesis: FILTER is syntax.
		t.Errorf("catalog with a VOLATILE public.filter: %v %v %q, want read", r.Class, r.Func, r.FuncName(q))
	}
	q = "SELECT filter(1)"
	if r := ClassifyWith(q, NewFunctions(defs, nil, nil)); r.Class != Session || r.Func != FuncVolatile {
		t.Errorf("%q with a VOLATILE public.filter: %v %v, want session, volatile", q, r.Class, r.Func)
	}
	defs = defs[:1]
	if r := ClassifyWith(q, NewFunctions(defs, nil, nil)); r.Class != Read {
		t.Errorf("no function named filter: %v %v, want read", r.Class, r.Func)
	}
}

func TestConfiguredFunctions(t *testing.T) {
	fn := testFunctions(t, []string{"jitter", "other.f", "newfunc"}, []string{"app.tenant_audit", "Public.Tenant", `"MixedCase"`})
	for _, tt := range []struct {
		sql  string
		want Class
		v    FuncVerdict
	}{
		{"SELECT jitter()", Read, FuncNone},
		{"SELECT public.jitter()", Read, FuncNone},
		{"SELECT other.f(1)", Read, FuncNone},
		{"SELECT f(1)", Read, FuncNone}, // app.f is STABLE, other.f listed
		{"SELECT newfunc()", Read, FuncNone},
		{"SELECT tenant()", Write, FuncWrite},
		{"SELECT public.tenant()", Write, FuncWrite},
		{"SELECT x.tenant()", Session, FuncUnknown},
		{"SELECT tenant_audit()", Write, FuncWrite},
		{"SELECT app.tenant_audit()", Write, FuncWrite},
		{`SELECT "MixedCase"()`, Write, FuncWrite},
		{"SELECT set_tenant('a')", Session, FuncVolatile},
	} {
		if r := ClassifyWith(tt.sql, fn); r.Class != tt.want || r.Func != tt.v {
			t.Errorf("ClassifyWith(%q) = %v, %v; want %v, %v", tt.sql, r.Class, r.Func, tt.want, tt.v)
		}
	}
}

func TestParseFuncName(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want FuncName
		err  bool
	}{
		{"f", FuncName{Name: "f"}, false},
		{" App.Set_Tenant ", FuncName{Schema: "app", Name: "set_tenant"}, false},
		{`"MyFunc"`, FuncName{Name: "MyFunc"}, false},
		{`app."My""F"`, FuncName{Schema: "app", Name: `My"F`}, false},
		{`"a.b".c`, FuncName{Schema: "a.b", Name: "c"}, false},
		{strings.Repeat("x", 70), FuncName{Name: strings.Repeat("x", 63)}, false},
		{"", FuncName{}, true},
		{"a.b.c", FuncName{}, true},
		{"a.", FuncName{}, true},
		{".a", FuncName{}, true},
		{"f()", FuncName{}, true},
		{"1f", FuncName{}, true},
		{`"f`, FuncName{}, true},
		{`""`, FuncName{}, true},
		{"a b", FuncName{}, true},
	} {
		got, err := ParseFuncName(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseFuncName(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err == nil {
			back, err := ParseFuncName(got.String())
			if err != nil || back != got {
				t.Errorf("ParseFuncName(%q.String() = %q) = %+v, %v", tt.in, got.String(), back, err)
			}
		}
	}
}

func TestClassifyWithDoesNotAllocate(t *testing.T) {
	fn := testFunctions(t, []string{"jitter"}, []string{"app.audit"})
	queries := append([]string{}, ormQueries...)
	for _, tt := range functionTests {
		queries = append(queries, tt.sql)
	}
	for _, q := range queries {
		if n := testing.AllocsPerRun(100, func() { ClassifyWith(q, fn) }); n != 0 {
			t.Errorf("ClassifyWith(%q) allocates %v times", q, n)
		}
	}
}

func BenchmarkClassifyWith(b *testing.B) {
	fn := testFunctions(b, nil, nil)
	total := 0
	for _, q := range ormQueries {
		total += len(q)
	}
	b.SetBytes(int64(total / len(ormQueries)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ClassifyWith(ormQueries[i%len(ormQueries)], fn)
	}
}

func TestChangesCatalog(t *testing.T) {
	for _, tt := range []struct {
		sql  string
		want bool
	}{
		{"CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$", true},
		{"create or replace function f() returns int language sql as 'select 1'", true},
		{"ALTER FUNCTION f() STABLE", true},
		{"DROP FUNCTION f()", true},
		{"CREATE EXTENSION pgcrypto", true},
		{"DO $$BEGIN EXECUTE 'CREATE FUNCTION g() RETURNS int AS ''SELECT 1'' LANGUAGE sql'; END$$", true},
		{"CALL p()", true},
		{"SELECT 1; DROP TABLE t", true},
		{"SELECT 'CREATE FUNCTION'", false},
		{"INSERT INTO created (a) VALUES (1)", false},
		{"SELECT create_time FROM t", false},
		{"BEGIN", false},
	} {
		if got := Classify(tt.sql).ChangesCatalog; got != tt.want {
			t.Errorf("Classify(%q).ChangesCatalog = %v, want %v", tt.sql, got, tt.want)
		}
	}
}

// TestWritesNothing: only one statement that changes nothing but its
// session writes nothing; any other statement, a string of several, and a
// text that reads as one only with standard_conforming_strings on, may.
func TestWritesNothing(t *testing.T) {
	for _, tt := range []struct {
		sql  string
		want bool
	}{
		{"SET application_name = 'x'", true},
		{"set search_path to app, public", true},
		{"SET LOCAL statement_timeout = '5s'", true},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", true},
		{"SET ROLE app", true},
		{"SET TRANSACTION READ ONLY", true},
		{"SET CONSTRAINTS ALL DEFERRED", true},
		{"SET local.tenant = 'x'", true},
		{"/* a comment */ SET TIME ZONE 'UTC'", true},
		{"RESET ALL", true},
		{"LISTEN jobs", true},
		{"UNLISTEN *", true},
		{"DEALLOCATE ALL", true},
		{"SET a.b = 1;", true},
		{"SET a.b = 1; INSERT INTO t VALUES (1)", false},
		{"SET a.b = 1; SET a.c = 2", false},
		{"SELECT set_config('a.b', 'x', false)", false},
		{"UPDATE pg_settings SET setting = 'x' WHERE name = 'a.b'", false},
		{"DISCARD ALL", false},
		{"DECLARE c CURSOR WITH HOLD FOR SELECT f()", false},
		{"PREPARE p AS INSERT INTO t VALUES (1)", false},
		{"INSERT INTO set (a) VALUES (1)", false},
		{"SELECT 1", false},
		{"BEGIN", false},
		{"SET a.b = 'x\\'; INSERT INTO t VALUES (1) --'", false},
	} {
		if got := Classify(tt.sql).WritesNothing; got != tt.want {
			t.Errorf("Classify(%q).WritesNothing = %v, want %v", tt.sql, got, tt.want)
		}
	}
}

// TestExtensionFunctions: the functions of contrib extensions are judged
// one by one (extensionFunctions), none by its extension alone. The
// definitions are those of PostgreSQL 15's install scripts.
func TestExtensionFunctions(t *testing.T) {
	defs := []FuncDef{
		{Schema: "pg_catalog", Name: "count"},
		{Schema: "public", Name: "set_limit", Volatile: true, Extension: "pg_trgm"},
		{Schema: "public", Name: "show_limit", Extension: "pg_trgm"},
		{Schema: "public", Name: "similarity", Extension: "pg_trgm"},
		{Schema: "public", Name: "new_volatile", Volatile: true, Extension: "pg_trgm"}, // a later version's
		{Schema: "public", Name: "isn_weak", Extension: "isn"},                         // IMMUTABLE
		{Schema: "public", Name: "is_valid", Extension: "isn"},
		{Schema: "public", Name: "uuid_generate_v4", Volatile: true, Extension: "uuid-ossp"},
		{Schema: "public", Name: "gen_random_uuid", Volatile: true, Extension: "pgcrypto"},
		{Schema: "public", Name: "normal_rand", Volatile: true, Extension: "tablefunc"},
		{Schema: "public", Name: "crosstab", Extension: "tablefunc"}, // STABLE
		{Schema: "public", Name: "connectby", Extension: "tablefunc"},
		{Schema: "public", Name: "system_rows", Volatile: true, Extension: "tsm_system_rows"},
		{Schema: "public", Name: "pg_stat_statements", Volatile: true, Extension: "pg_stat_statements"},
		{Schema: "public", Name: "pg_stat_statements_reset", Volatile: true, Extension: "pg_stat_statements"},
		{Schema: "public", Name: "hstore_volatile", Volatile: true, Extension: "hstore"}, // not in its script
	}
	fn := NewFunctions(defs, nil, nil)
	for _, tt := range []struct {
		sql  string
		want Class
		v    FuncVerdict
	}{
		{"SELECT set_limit(0.9)", Session, FuncNone},
		{"SELECT public.set_limit(0.9)", Session, FuncNone},
		{"SELECT show_limit(), similarity('a', 'b')", Read, FuncNone},
		{"SELECT new_volatile()", Session, FuncVolatile},
		{"SELECT isn_weak(true)", Session, FuncNone},
		{"SELECT is_valid('978-0-393-04002-9'::isbn13)", Read, FuncNone},
		{"SELECT uuid_generate_v4(), gen_random_uuid()", Read, FuncNone},
		{"SELECT * FROM normal_rand(10, 0, 1)", Read, FuncNone},
		{"SELECT * FROM crosstab('SELECT 1, 2, 3') AS t(a int, b int)", Session, FuncNone},
		{"SELECT * FROM connectby('t', 'k', 'p', '1', 0) AS t(k text, p text, l int)", Session, FuncNone},
		{"SELECT count(*) FROM t TABLESAMPLE system_rows (10)", Read, FuncNone},
		{"SELECT * FROM pg_stat_statements(true)", Read, FuncNone},
		{"SELECT pg_stat_statements_reset()", Write, FuncNone},
		{"SELECT hstore_volatile()", Session, FuncVolatile},
	} {
		if r := ClassifyWith(tt.sql, fn); r.Class != tt.want || r.Func != tt.v {
			t.Errorf("ClassifyWith(%q) = %v, %v; want %v, %v", tt.sql, r.Class, r.Func, tt.want, tt.v)
		}
	}
	// What extensionFunctions says of a function that changes the session
	// or writes, funcClass does, with or without a catalog.
	for ext, fns := range extensionFunctions {
		for name, d := range fns {
			want := Read
			switch d {
			case extSession:
				want = Session
			case extWrite:
				want = Write
			}
			if got := funcClass(name); got != want {
				t.Errorf("%s: funcClass(%q) = %v, want %v", ext, name, got, want)
			}
		}
	}
}

// TestKeywordNamedFunctions: a function the catalog knows is judged as a
// function even when its name is a key word that also comes before a
// parenthesis in the grammar (next, first, verbose, left): the catalog's
// word wins over the syntax (FETCH FIRST (3) ROWS then pins too, which is
// safe). Only a name the catalog does not know is taken for the syntax.
func TestKeywordNamedFunctions(t *testing.T) {
	f := NewFunctions([]FuncDef{
		{Schema: "public", Name: "next", Volatile: true}, {Schema: "public", Name: "first", Volatile: true},
		{Schema: "public", Name: "verbose", Volatile: true}, {Schema: "public", Name: "left", Volatile: true},
	}, nil, nil)
	for _, q := range []string{"SELECT next(1)", "SELECT first(x) FROM t", "SELECT verbose(1)", `SELECT "left"('a', 1)`, "SELECT left('a', 1)"} {
		if r := ClassifyWith(q, f); r.Class != Session || r.Func != FuncVolatile {
			t.Errorf("ClassifyWith(%q) = %v %v, want session, volatile-function", q, r.Class, r.Func)
		}
	}
	empty := NewFunctions([]FuncDef{{Schema: "pg_catalog", Name: "count"}}, nil, nil)
	if r := ClassifyWith("SELECT x FROM t OFFSET 1 ROWS FETCH NEXT (2) ROWS ONLY", empty); r.Class != Read {
		t.Errorf("FETCH NEXT (2) without a function next: %v %v, want read", r.Class, r.Func)
	}
}

// TestAssumeHidden: a classification taken for hidden code is the
// primary's, with its session kept there (class Session, FuncHidden),
// whatever it was; it names no object, not even another verdict's.
func TestAssumeHidden(t *testing.T) {
	r := Classify("SELECT m FROM v")
	r.AssumeHidden()
	if r.Class != Session || !r.Has(Session) || r.Func != FuncHidden || r.FuncName("SELECT m FROM v") != "" {
		t.Errorf("a read taken for hidden code: class %s, session %v, verdict %s, name %q", r.Class, r.Has(Session), r.Func, r.FuncName("SELECT m FROM v"))
	}
	const q = "SELECT hid.f(1)"
	r = Result{Class: Session, Func: FuncVolatile, FuncStart: 7, FuncEnd: 12}
	r.AssumeHidden()
	if r.Func != FuncHidden || r.FuncName(q) != "" {
		t.Errorf("a volatile call taken for hidden code: %s %q", r.Func, r.FuncName(q))
	}
}
