package sqlclass

import (
	"fmt"
	"slices"
	"strings"
)

// FuncDef is one definition of a function, as the catalog (pg_proc) of the
// primary holds it. [CatalogQuery] reads them.
type FuncDef struct {
	Schema    string // pg_namespace.nspname
	Name      string // pg_proc.proname, exactly as stored
	Volatile  bool   // provolatile = 'v'
	Procedure bool   // prokind = 'p'
	Extension string // the extension the function belongs to, or ""
	OID       uint32 // pg_proc.oid (0: not known)
	Args      int    // pronargs
}

// CatalogQuery reads every function definition of the database: schema,
// name, volatility ('i', 's' or 'v'), kind ('f', 'p', 'a' or 'w'), the
// extension it belongs to (or NULL), its OID and its number of arguments.
// It only reads the catalog, and runs on any server, primary or standby.
const CatalogQuery = `SELECT n.nspname::text, p.proname::text, p.provolatile::text, p.prokind::text, e.extname::text,
  p.oid::int8, p.pronargs::int4
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
LEFT JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid AND d.deptype = 'e'
LEFT JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid`

// FuncName is a function name as configured, optionally schema-qualified:
// Schema is "" for a name that matches the function in every schema.
type FuncName struct {
	Schema, Name string
}

// String returns the name as SQL would write it, quoting what needs it.
func (n FuncName) String() string {
	if n.Schema == "" {
		return quoteIdent(n.Name)
	}
	return quoteIdent(n.Schema) + "." + quoteIdent(n.Name)
}

// ParseFuncName parses a function name as a user writes it in SQL:
// name, schema.name, with double quotes around a part that keeps its case
// or holds other characters ("MyFunc", app."Tenant"). Unquoted parts are
// folded to lower case, as PostgreSQL folds them.
func ParseFuncName(s string) (FuncName, error) {
	s = strings.TrimSpace(s)
	var parts []string
	for len(s) > 0 {
		var part string
		if s[0] == '"' {
			var b strings.Builder
			i := 1
			for {
				if i >= len(s) {
					return FuncName{}, fmt.Errorf("unterminated quoted identifier")
				}
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						b.WriteByte('"')
						i += 2
						continue
					}
					i++
					break
				}
				b.WriteByte(s[i])
				i++
			}
			part, s = b.String(), s[i:]
			if part == "" {
				return FuncName{}, fmt.Errorf("empty quoted identifier")
			}
		} else {
			i := 0
			for i < len(s) && s[i] != '.' {
				c := s[i]
				if ctab[c]&cIdentCont == 0 || (i == 0 && ctab[c]&cIdentStart == 0) {
					return FuncName{}, fmt.Errorf("%q is not a function name (quote it: \"…\")", s)
				}
				i++
			}
			if i == 0 {
				return FuncName{}, fmt.Errorf("empty name")
			}
			part, s = strings.ToLower(s[:i]), s[i:]
		}
		if len(part) > maxIdentLen {
			part = part[:maxIdentLen]
		}
		parts = append(parts, part)
		if len(s) > 0 {
			if s[0] != '.' || len(s) == 1 {
				return FuncName{}, fmt.Errorf("unexpected %q after a name", s)
			}
			s = s[1:]
		}
	}
	switch len(parts) {
	case 1:
		return FuncName{Name: parts[0]}, nil
	case 2:
		return FuncName{Schema: parts[0], Name: parts[1]}, nil
	}
	return FuncName{}, fmt.Errorf("a function name is name or schema.name")
}

func quoteIdent(s string) string {
	plain := s != ""
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && (c >= '0' && c <= '9' || c == '$')) {
			plain = false
			break
		}
	}
	if plain {
		if _, kw := sqlKeywords[s]; !kw {
			return s
		}
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// maxIdentLen is the longest identifier PostgreSQL keeps (NAMEDATALEN-1);
// a longer one is truncated.
const maxIdentLen = 63

// Functions is what is known of the functions a statement may call: a
// snapshot of the primary's catalog and the functions configured as reads
// or writes. It is immutable; build a new one when the catalog changes.
//
// A nil *Functions knows nothing: [ClassifyWith] then only applies the
// curated classification of built-in functions, as [Classify] does.
type Functions struct {
	// The catalog's definitions grouped by name: the definitions of
	// names[i] are defs[ends[i-1]:ends[i]] (from 0 for i = 0). Sorted
	// slices rather than a map of slices: a catalog holds thousands of
	// functions, and a snapshot lives as long as its Connector.
	names   []string // distinct, sorted
	ends    []int32
	defs    []funcDef
	schemas []string   // funcDef.schema indexes it
	read    []FuncName // VOLATILE functions that only read
	write   []FuncName // functions to send to the primary whatever their label
	count   int
	rels    *relations // the catalog's relations (SetRelations), nil when not known
	hidden  *hidden    // the code statements run unseen (SetHidden), nil when not known
}

// funcDef is the part of a FuncDef the classification needs.
type funcDef struct {
	schema  uint32 // index in Functions.schemas
	oid     uint32 // pg_proc.oid, 0 when not known
	risky   bool   // VOLATILE or a procedure, not known to be pure, or may run such code (SetHidden)
	builtin bool   // a function of the server itself (Functions.builtin)
}

// NewFunctions builds a snapshot from the catalog's definitions (nil or
// empty: no function is known yet, so every call of a function that is not
// a key word is unknown) and the configured read and write functions.
func NewFunctions(defs []FuncDef, read, write []FuncName) *Functions {
	f := &Functions{
		read:  append([]FuncName(nil), read...),
		write: append([]FuncName(nil), write...),
		count: len(defs),
	}
	order := make([]int, len(defs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(defs[a].Name, defs[b].Name) })
	distinct := 0
	for k, i := range order {
		if k == 0 || defs[i].Name != defs[order[k-1]].Name {
			distinct++
		}
	}
	f.names, f.ends = make([]string, 0, distinct), make([]int32, 0, distinct)
	f.defs = make([]funcDef, 0, len(defs))
	schemaIdx := map[string]uint32{}
	for k, i := range order {
		d := &defs[i]
		if k == 0 || d.Name != f.names[len(f.names)-1] {
			if k > 0 {
				f.ends = append(f.ends, int32(len(f.defs)))
			}
			f.names = append(f.names, d.Name)
		}
		// Builtins (the server's own, in pg_catalog and
		// information_schema): the curated list decides.
		builtin := f.builtin(d)
		// A function of an extension that extensionFunctions decides on
		// is decided there (and by funcClass), as a builtin is.
		risky := (d.Volatile || d.Procedure) && !builtin && extensionFunctions[d.Extension][d.Name] == extJudged
		if risky && listed(f.read, d.Schema, d.Name) {
			risky = false
		}
		si, ok := schemaIdx[d.Schema]
		if !ok {
			si = uint32(len(f.schemas))
			schemaIdx[d.Schema] = si
			f.schemas = append(f.schemas, d.Schema)
		}
		f.defs = append(f.defs, funcDef{schema: si, oid: d.OID, risky: risky, builtin: builtin})
	}
	if len(f.names) > 0 {
		f.ends = append(f.ends, int32(len(f.defs)))
	}
	return f
}

// lookup returns the definitions of name, and false when the catalog has
// none.
func (f *Functions) lookup(name string) ([]funcDef, bool) {
	i, ok := slices.BinarySearch(f.names, name)
	if !ok {
		return nil, false
	}
	lo := int32(0)
	if i > 0 {
		lo = f.ends[i-1]
	}
	return f.defs[lo:f.ends[i]], true
}

// Len returns the number of function definitions in the snapshot.
func (f *Functions) Len() int {
	if f == nil {
		return 0
	}
	return f.count
}

// extDecision is the decision on a function of a contrib extension.
type extDecision uint8

const (
	// extJudged: nothing is known beyond the catalog; the function is
	// judged by its volatility, as a user function is.
	extJudged extDecision = iota
	// extPure: VOLATILE (or with internal arguments), but neither writes
	// nor changes the session: a read.
	extPure
	// extSession: changes the session, or runs a query given as text
	// (which may call set_config): funcClass lists it as Session, so it
	// pins whatever its label and with or without a catalog.
	extSession
	// extWrite: writes: funcClass lists it as Write.
	extWrite
)

// extensionFunctions holds, for each contrib extension whose functions
// applications commonly call, the decision on each of its functions that
// is VOLATILE in its install and update scripts
// (contrib/<extension>/<extension>--<version>.sql in PostgreSQL's source,
// /usr/share/postgresql/<major>/extension/ once installed), and on each
// that writes or changes the session whatever its label. No extension is
// trusted whole: a function not listed here is judged by its volatility,
// like any user function, so a VOLATILE function that a later version of an
// extension adds pins until it is listed here as pure.
//
// The other functions of these extensions are IMMUTABLE or STABLE and do
// what their labels say; these have no function to list: citext, hstore,
// fuzzystrmatch, intarray, ltree, cube, earthdistance, btree_gin,
// btree_gist (their scripts declare every function IMMUTABLE or STABLE,
// the selectivity estimators of intarray included).
var extensionFunctions = map[string]map[string]extDecision{
	// uuid-ossp--1.1.sql: uuid_generate_v1, _v1mc and _v4 are VOLATILE
	// (a clock, a MAC address, random bytes); _v3, _v5 and uuid_nil,
	// uuid_ns_* are IMMUTABLE.
	"uuid-ossp": {"uuid_generate_v1": extPure, "uuid_generate_v1mc": extPure, "uuid_generate_v4": extPure},
	// pgcrypto--1.3.sql: gen_salt, gen_random_bytes, gen_random_uuid
	// (also pgcrypto--1.0--1.1.sql) are VOLATILE, and pgp_sym_encrypt,
	// pgp_sym_encrypt_bytea, pgp_pub_encrypt, pgp_pub_encrypt_bytea are
	// by default (a random session key); pgcrypto--1.3--1.4.sql
	// (PostgreSQL 17): fips_mode is VOLATILE and reads. None writes or
	// changes the session.
	"pgcrypto": {"gen_salt": extPure, "gen_random_bytes": extPure, "gen_random_uuid": extPure,
		"pgp_sym_encrypt": extPure, "pgp_sym_encrypt_bytea": extPure,
		"pgp_pub_encrypt": extPure, "pgp_pub_encrypt_bytea": extPure, "fips_mode": extPure},
	// pg_trgm--1.3.sql: set_limit(float4) is VOLATILE and sets
	// pg_trgm.similarity_threshold for the session (show_limit, STABLE,
	// reads it, as the % operator's functions do).
	"pg_trgm": {"set_limit": extSession},
	// isn--1.1.sql: isn_weak(boolean) "sets the weak input mode" of the
	// session, and is declared IMMUTABLE; isn_weak() reads it.
	"isn": {"isn_weak": extSession},
	// tablefunc--1.0.sql: normal_rand is VOLATILE (random numbers);
	// crosstab(text), crosstab(text, int), crosstab(text, text),
	// crosstab2, crosstab3, crosstab4 (STABLE) run the query their text
	// argument holds, and connectby (STABLE) runs one built from its
	// arguments: a SELECT of set_config there changes the session.
	"tablefunc": {"normal_rand": extPure, "crosstab": extSession, "crosstab2": extSession,
		"crosstab3": extSession, "crosstab4": extSession, "connectby": extSession},
	// tsm_system_rows--1.0.sql, tsm_system_time--1.0.sql: the
	// TABLESAMPLE methods' handlers (internal), VOLATILE by default.
	"tsm_system_rows": {"system_rows": extPure},
	"tsm_system_time": {"system_time": extPure},
	// unaccent--1.1.sql: the dictionary template's unaccent_init and
	// unaccent_lexize (internal), VOLATILE by default; unaccent is STABLE.
	"unaccent": {"unaccent_init": extPure, "unaccent_lexize": extPure},
	// pg_stat_statements--1.4.sql and its updates to 1.10 (1.11,
	// PostgreSQL 17, keeps the names): pg_stat_statements and
	// pg_stat_statements_info are VOLATILE and read the server's
	// counters; pg_stat_statements_reset resets them.
	"pg_stat_statements": {"pg_stat_statements": extPure, "pg_stat_statements_info": extPure,
		"pg_stat_statements_reset": extWrite},
}

// listed reports whether a function schema.name (schema "" when the call
// does not qualify it) is in list: an entry without a schema matches the
// name in every schema; a qualified entry matches the same schema, or an
// unqualified call, which may resolve to it.
func listed(list []FuncName, schema, name string) bool {
	for _, e := range list {
		if e.Name == name && (e.Schema == "" || schema == "" || e.Schema == schema) {
			return true
		}
	}
	return false
}

// FuncVerdict is what the functions a statement calls make of it, beyond
// the curated built-in functions.
type FuncVerdict uint8

const (
	// FuncNone: no call changes where the statement runs.
	FuncNone FuncVerdict = iota
	// FuncWrite: a call of a function configured as a write: the primary.
	FuncWrite
	// FuncUnknown: a call of a function the catalog does not know (yet):
	// the primary, and the session stays there, as for [Session].
	FuncUnknown
	// FuncVolatile: a call of a function with a VOLATILE definition (or a
	// procedure) outside the built-ins: it may write or change the session,
	// so the primary, and the session stays there.
	FuncVolatile
	// FuncHidden: the statement runs user code that its text does not
	// show as a call (hidden.go: an aggregate's functions, an operator, a
	// cast, a domain's check, a type's I/O, a view, a policy, attribute
	// notation) and that may write or change the session: the primary,
	// and the session stays there. The name behind it is the object's.
	FuncHidden
)

// String returns "none", "write-function", "unknown-function",
// "volatile-function" or "hidden-code".
func (v FuncVerdict) String() string {
	switch v {
	case FuncNone:
		return "none"
	case FuncWrite:
		return "write-function"
	case FuncUnknown:
		return "unknown-function"
	case FuncVolatile:
		return "volatile-function"
	case FuncHidden:
		return "hidden-code"
	}
	return fmt.Sprintf("FuncVerdict(%d)", uint8(v))
}

// class is the class a call with verdict v gives a statement.
func (v FuncVerdict) class() Class {
	switch v {
	case FuncWrite:
		return Write
	case FuncUnknown, FuncVolatile, FuncHidden:
		return Session
	}
	return Read
}

// syntaxWords are unreserved key words that come before an opening
// parenthesis in the syntax of queries and DML without being a function
// call (GROUP BY CUBE (…), ON CONFLICT (…), FILTER (…), AS MATERIALIZED
// (…), INTERVAL … SECOND (3) …, JSON_TABLE's COLUMNS (…), OPERATOR(…)). Other
// unreserved key words can name a function, so a call of one that the
// catalog does not know is unknown: JSON_TABLE's NESTED [PATH] and PATH
// (PostgreSQL 17) are followed by a string constant, never by a
// parenthesis, so nested(…) and path(…) are calls.
var syntaxWords = map[string]bool{
	"set": true, "insert": true, "conflict": true, "cube": true, "rollup": true,
	"sets": true, "filter": true, "over": true, "within": true, "materialized": true,
	"repeatable": true, "columns": true, "zone": true, "escape": true, "first": true,
	"next": true, "second": true, "minute": true, "hour": true, "day": true,
	"month": true, "year": true, "passing": true,
	"include": true, "partition": true, "range": true, "rows": true, "groups": true,
	"operator": true, // a OPERATOR(schema.+) b
}

// judge returns the verdict on a call of name (schema: its qualifier, or
// ""), both as PostgreSQL folds them. keyword is set when the name, as
// written, is an unqualified unquoted word.
func (f *Functions) judge(schema, name string, keyword bool) FuncVerdict {
	if listed(f.write, schema, name) {
		return FuncWrite
	}
	defs, known := f.lookup(name)
	if keyword && schema == "" && !known {
		if cat, ok := sqlKeywords[name]; ok && (cat != kwcatUnreserved || syntaxWords[name]) {
			return FuncNone // IN (…), EXISTS (…), COALESCE(…), CAST(…): syntax
		}
	}
	matched := false
	verdict := FuncNone
	for i := range defs {
		d := &defs[i]
		if schema != "" && f.schemas[d.schema] != schema {
			continue
		}
		matched = true
		if d.risky {
			verdict = FuncVolatile
		}
	}
	if !matched && !listed(f.read, schema, name) {
		return FuncUnknown
	}
	return verdict
}

// tableReaders are built-in functions that read relations the statement
// does not name: they run a query given as text, or read a table by its
// name or a large object (see relations.go).
var tableReaders = map[string]bool{
	"query_to_xml": true, "query_to_xml_and_xmlschema": true, "query_to_xmlschema": true,
	"table_to_xml": true, "table_to_xml_and_xmlschema": true, "table_to_xmlschema": true,
	"cursor_to_xml": true, "cursor_to_xmlschema": true,
	"schema_to_xml": true, "schema_to_xml_and_xmlschema": true, "schema_to_xmlschema": true,
	"database_to_xml": true, "database_to_xml_and_xmlschema": true, "database_to_xmlschema": true,
	"ts_stat": true, "ts_rewrite": true, "lo_get": true, "loread": true,
}

// userFunction reports whether a call of name (schema: its qualifier, or
// ""), both as PostgreSQL folds them, may read relations the statement does
// not name: a function outside pg_catalog and information_schema, one the
// catalog does not know, or a built-in that reads relations by other means
// (tableReaders). keyword: as for judge; syntax (IN (…), COALESCE(…)) is no
// call.
func (f *Functions) userFunction(schema, name string, keyword bool) bool {
	if f == nil {
		return true
	}
	defs, known := f.lookup(name)
	if keyword && schema == "" && !known {
		if cat, ok := sqlKeywords[name]; ok && (cat != kwcatUnreserved || syntaxWords[name]) {
			return false
		}
	}
	if !known || tableReaders[name] {
		return true
	}
	matched := false
	for i := range defs {
		if schema != "" && f.schemas[defs[i].schema] != schema {
			continue
		}
		matched = true
		if !defs[i].builtin {
			return true
		}
	}
	return !matched
}
