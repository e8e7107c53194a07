package sqlclass

import "testing"

// hiddenCatalog is a small catalog, as the Hidden queries would read it:
//
//	leak (VOLATILE, 1 arg), plus (IMMUTABLE), bump (IMMUTABLE, whose
//	BEGIN ATOMIC body calls leak); pg_advisory_lock (built-in);
//	aggregates leaky_sum (sfunc leak) and safe_sum (sfunc plus);
//	operators ##@ (leak), ##+ (plus), #! (pg_advisory_lock);
//	types: leaky_dom (CHECK calls leak), nested_dom over it, safe_dom
//	(CHECK VALUE > 0), config_dom (CHECK calls set_config), pair (an
//	explicit cast from int4 by leak), weird (input function leak), int4;
//	relations: t (plain), w (a column of type weird), leaky_view (calls
//	leak), config_view (calls set_config), view_of (over leaky_view),
//	safe_view, rls (a policy calling leak).
func hiddenCatalog() (*Functions, []FuncDef) {
	funcs := []FuncDef{
		{Schema: "app", Name: "leak", Volatile: true, OID: 20001, Args: 1},
		{Schema: "app", Name: "plus", OID: 20002, Args: 2},
		{Schema: "app", Name: "bump", OID: 20003, Args: 0},
		{Schema: "app", Name: "leaky_sum", OID: 20004, Args: 1},
		{Schema: "app", Name: "safe_sum", OID: 20005, Args: 1},
		{Schema: "app", Name: "by_weird", OID: 20006, Args: 1},
		{Schema: "pg_catalog", Name: "pg_advisory_lock", Volatile: true, OID: 2880, Args: 1},
		{Schema: "pg_catalog", Name: "count", OID: 2803, Args: 0},
	}
	objs := []ObjectDef{
		{Kind: 't', OID: 23, Name: "int4"},
		{Kind: 't', OID: 25, Name: "text"},
		{Kind: 't', OID: 30001, Name: "leaky_dom"},
		{Kind: 't', OID: 30002, Name: "nested_dom"},
		{Kind: 't', OID: 30003, Name: "safe_dom"},
		{Kind: 't', OID: 30004, Name: "config_dom"},
		{Kind: 't', OID: 30004, Text: "SELECT CHECK (set_config('a', 'b', false) <> '')"},
		{Kind: 't', OID: 30003, Text: "SELECT CHECK ((VALUE > 0))"},
		{Kind: 't', OID: 30005, Name: "pair"},
		{Kind: 't', OID: 30006, Name: "weird"},
		{Kind: 'o', OID: 40001, Name: "##@"},
		{Kind: 'o', OID: 40002, Name: "##+"},
		{Kind: 'o', OID: 40003, Name: "#!"},
		{Kind: 'r', OID: 50001, Name: "t"},
		{Kind: 'r', OID: 50002, Name: "w"},
		{Kind: 'r', OID: 50003, Name: "leaky_view", Text: "SELECT app.leak(x) AS m FROM t"},
		{Kind: 'r', OID: 50004, Name: "config_view", Text: " SELECT set_config('a'::text, 'b'::text, false) AS m;"},
		{Kind: 'r', OID: 50005, Name: "view_of", Text: "SELECT m FROM leaky_view"},
		{Kind: 'r', OID: 50006, Name: "safe_view", Text: "SELECT x FROM t"},
		{Kind: 'r', OID: 50007, Name: "rls"},
		{Kind: 'r', OID: 50007, Text: "SELECT (x > 0)"},
	}
	edges := []EdgeDef{
		{'f', 20003, 'f', 20001}, // bump's body calls leak
		{'f', 20004, 'f', 20001}, // leaky_sum's sfunc
		{'f', 20005, 'f', 20002}, // safe_sum's sfunc
		{'f', 20006, 't', 30006}, // by_weird takes a weird
		{'o', 40001, 'f', 20001}, // ##@
		{'o', 40002, 'f', 20002}, // ##+
		{'o', 40003, 'f', 2880},  // #!: pg_advisory_lock
		{'t', 30001, 'f', 20001}, // leaky_dom's CHECK
		{'t', 30002, 't', 30001}, // nested_dom's base
		{'x', 30005, 'f', 20001}, // int4::pair by leak
		{'t', 30006, 'f', 20001}, // weird's input
		{'r', 50002, 't', 30006}, // w has a weird column
		{'r', 50003, 'f', 20001}, // leaky_view's rule
		{'r', 50005, 'r', 50003}, // view_of's rule reads leaky_view
		{'r', 50007, 'f', 20001}, // rls's policy
		{'r', 50006, 'r', 50001}, // safe_view reads t
		{'r', 50001, 't', 23},    // t has an int4 column
		{'f', 20002, 't', 23},    // plus takes int4
		{'t', 30003, 't', 23},    // safe_dom over int4
		{'t', 30001, 't', 23},    // leaky_dom over int4
		{'o', 40002, 't', 23},    // ##+ over int4
		{'f', 20005, 't', 23},    // safe_sum over int4
		{'r', 50006, 't', 23},    // safe_view's column
	}
	f := NewFunctions(funcs, nil, nil)
	f.SetHidden(funcs, objs, edges)
	return f, funcs
}

func TestHiddenCode(t *testing.T) {
	f, _ := hiddenCatalog()
	for _, tt := range []struct {
		sql  string
		want Class
		fv   FuncVerdict
		name string
	}{
		// Aggregates: judged by their support functions.
		{"SELECT app.leaky_sum(x) FROM t", Session, FuncVolatile, "leaky_sum"},
		{"SELECT app.safe_sum(x) FROM t", Read, FuncNone, ""},
		// A SQL-standard body that calls VOLATILE code.
		{"SELECT app.bump()", Session, FuncVolatile, "bump"},
		// A function whose argument's type runs VOLATILE code.
		{"SELECT app.by_weird('x')", Session, FuncVolatile, "by_weird"},
		// Attribute notation.
		{"SELECT r.leak FROM t r", Session, FuncHidden, "leak"},
		{"SELECT (r).leak FROM t r", Session, FuncHidden, "leak"},
		{"SELECT r.plus FROM t r", Read, FuncNone, ""},
		{"SELECT app.leak(1)", Session, FuncVolatile, "leak"}, // a call, by name
		// Operators, inside any run of operator characters.
		{"SELECT 1 ##@ 2", Session, FuncHidden, "##@"},
		{"SELECT 1 OPERATOR(app.##@) 2", Session, FuncHidden, "##@"},
		{"SELECT 1##@-2", Session, FuncHidden, "##@"},
		{"SELECT 1 ##+ 2", Read, FuncNone, ""},
		{"SELECT 1 # # @ 2", Read, FuncNone, ""},
		{"SELECT '##@'", Read, FuncNone, ""},
		{"SELECT 1 /* ##@ */ + 2", Read, FuncNone, ""},
		{"SELECT #! 5", Session, FuncHidden, "#!"},
		// Domains, nested; a domain whose CHECK calls set_config.
		{"SELECT 5::leaky_dom", Session, FuncHidden, "leaky_dom"},
		{"SELECT CAST(5 AS app.nested_dom)", Session, FuncHidden, "nested_dom"},
		{`SELECT 5::"nested_dom"`, Session, FuncHidden, "nested_dom"},
		{"SELECT 5::config_dom", Session, FuncHidden, "config_dom"},
		{"SELECT 5::safe_dom", Read, FuncNone, ""},
		// A cast WITH FUNCTION into pair runs where pair is named.
		{"SELECT (5::pair).v", Session, FuncHidden, "pair"},
		// A type's I/O: named, or in a table's column.
		{"SELECT 'x'::weird", Session, FuncHidden, "weird"},
		{"SELECT * FROM w", Session, FuncHidden, "w"},
		// Views, nested, and views over plain tables.
		{"SELECT m FROM leaky_view", Session, FuncHidden, "leaky_view"},
		{"SELECT m FROM config_view", Session, FuncHidden, "config_view"},
		{"SELECT m FROM view_of", Session, FuncHidden, "view_of"},
		{"SELECT app.safe_sum(m) FROM leaky_view", Session, FuncHidden, "leaky_view"},
		{"SELECT x FROM safe_view", Read, FuncNone, ""},
		{"TABLE leaky_view", Session, FuncHidden, "leaky_view"},
		// A policy.
		{"SELECT x FROM rls", Session, FuncHidden, "rls"},
		// EXPLAIN is judged as what it explains.
		{"EXPLAIN SELECT m FROM leaky_view", Session, FuncHidden, "leaky_view"},
		{"EXPLAIN SELECT x FROM safe_view", Read, FuncNone, ""},
		// A write that runs hidden code pins too.
		{"INSERT INTO t SELECT 5::leaky_dom", Session, FuncHidden, "leaky_dom"},
		// Names in strings, comments and other words do not count.
		{"SELECT 'leaky_view'", Read, FuncNone, ""},
		{"SELECT 1 -- leaky_view", Read, FuncNone, ""},
		{"SELECT leaky_viewx FROM t", Read, FuncNone, ""},
		// A cast to a type the snapshot does not know: unknown.
		{"SELECT 5::brand_new", Session, FuncUnknown, "brand_new"},
		{"SELECT 5::app.brand_new", Session, FuncUnknown, "brand_new"},
		{"SELECT 5::int4, 'a'::text, 1::integer, 2::double precision, 3::numeric(3, 1), x::int4[]", Read, FuncNone, ""},
	} {
		r := ClassifyWith(tt.sql, f)
		if r.Class != tt.want || r.Func != tt.fv || r.FuncName(tt.sql) != tt.name {
			t.Errorf("ClassifyWith(%q) = %v, %v %q; want %v, %v %q", tt.sql, r.Class, r.Func, r.FuncName(tt.sql), tt.want, tt.fv, tt.name)
		}
	}
}

// TestHiddenReadListed: a function configured as a read stays one, and so
// do what runs it.
func TestHiddenReadListed(t *testing.T) {
	_, funcs := hiddenCatalog()
	f := NewFunctions(funcs, []FuncName{{Name: "leak"}}, nil)
	f.SetHidden(funcs, nil, []EdgeDef{{'f', 20004, 'f', 20001}})
	if r := ClassifyWith("SELECT app.leaky_sum(x) FROM t", f); r.Class != Read {
		t.Errorf("an aggregate over a read-listed function: %v %v, want read", r.Class, r.Func)
	}
}

// TestExtensionInCatalogIsNoBuiltin: a function an extension installed in
// pg_catalog (adminpack's pg_file_write) is judged by its label, as a
// user function is.
func TestExtensionInCatalogIsNoBuiltin(t *testing.T) {
	f := NewFunctions([]FuncDef{
		{Schema: "pg_catalog", Name: "pg_file_write", Volatile: true, Extension: "adminpack"},
		{Schema: "pg_catalog", Name: "random", Volatile: true},
	}, nil, nil)
	if r := ClassifyWith("SELECT pg_file_write('f', 'x', false)", f); r.Class != Session || r.Func != FuncVolatile {
		t.Errorf("pg_file_write: %v %v, want session, volatile-function", r.Class, r.Func)
	}
	if r := ClassifyWith("SELECT random()", f); r.Class != Read {
		t.Errorf("random: %v %v, want read", r.Class, r.Func)
	}
}

// TestHiddenAllocations: a read of named objects costs no allocation.
func TestHiddenAllocations(t *testing.T) {
	f, _ := hiddenCatalog()
	for _, q := range []string{"SELECT x FROM safe_view WHERE x ##+ 1", "SELECT m FROM leaky_view", "SELECT 5::safe_dom, r.plus FROM t r",
		"SELECT 5::a_type_name_longer_than_thirty_two_bytes_xxxxxxxxx, r.a_column_name_longer_than_thirty_two_bytes FROM t r"} {
		if n := testing.AllocsPerRun(100, func() { ClassifyWith(q, f) }); n != 0 {
			t.Errorf("ClassifyWith(%q): %v allocations, want 0", q, n)
		}
	}
}

// BenchmarkClassifyWithHidden is BenchmarkClassifyWith on a snapshot that
// knows risky objects (none of which the queries name): the cost of
// looking every name up.
func BenchmarkClassifyWithHidden(b *testing.B) {
	f, funcs := hiddenCatalog()
	fn := testFunctions(b, nil, nil)
	fn.SetHidden(funcs, nil, nil)
	fn.hidden = f.hidden
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ClassifyWith(ormQueries[i%len(ormQueries)], fn)
	}
}
