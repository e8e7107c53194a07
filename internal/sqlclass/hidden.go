package sqlclass

import (
	"slices"
	"strings"
)

// This file is the code a statement runs that its text does not show as a
// call: an aggregate's transition, final, combine and serialization
// functions; an operator's function; a cast's function; a domain's CHECK
// constraints (nested domains too); a type's input and output functions
// and those of its default operator classes; a view's query; a
// row-level security policy; a SQL-standard function body (BEGIN ATOMIC).
// PostgreSQL runs each when the statement names the object that owns it,
// or one that depends on it (a table with a column of such a type, a
// function that returns it, a view over such a table), and any of them
// may call set_config or take an advisory lock, which a shared replica
// connection would then carry to its next user.
//
// The catalog (HiddenObjectsQuery, HiddenEdgesQuery) gives the objects and
// what each may run; [Functions.SetHidden] closes that over the "may run"
// relation from the functions known to change the session or to write
// (VOLATILE user functions, procedures, the curated built-ins of
// funcClass), the view, policy and domain-constraint texts that the
// lexical classification does not take for a read, and records:
//   - for each user function, whether it is risky: a call of it, or of an
//     aggregate over it, is judged as a call of a VOLATILE function;
//   - the names of the risky types, relations and one-argument functions
//     (attribute notation, r.fn) and the symbols of the risky operators,
//     which the classifier looks for in the statement's text: a name
//     anywhere, a function's name after a period, an operator's symbol
//     inside a run of operator characters;
//   - every type name the catalog has, so that a cast (x::t) to a type the
//     snapshot does not know is unknown, as a call of an unknown function
//     is.
//
// A name is matched whatever its schema, so an object is risky for every
// schema where one of its name is; that is conservative. What the catalog
// cannot resolve to one known object is the primary's, not a replica's.

// FirstNormalObjectID is the first OID PostgreSQL gives to an object that
// initdb did not create (FirstNormalObjectId): the server's own objects
// are below it, user and extension objects from it on.
const FirstNormalObjectID = 16384

// ObjectDef is a row of [HiddenObjectsQuery]: an object of kind Kind ('t'
// type, 'o' operator, 'r' relation) and OID, with its Name ("" for a row
// that only carries a Text), and Text, a query the object runs whenever
// it is used (a view's query; a SELECT of a policy's expressions or of a
// domain's CHECK constraint): the object is risky unless it classifies as
// a [Read].
type ObjectDef struct {
	Kind byte
	OID  uint32
	Name string
	Text string
}

// EdgeDef is a row of [HiddenEdgesQuery]: the object (Kind, OID) may run
// the code of the object (RefKind, RefOID), a function ('f'), type ('t'),
// relation ('r') or operator ('o'), so it is risky when that one is. Kind
// 'x' is an explicit cast into type OID: its function runs only where the
// statement names that type, so the type's name is risky, the type itself
// not.
type EdgeDef struct {
	Kind    byte
	OID     uint32
	RefKind byte
	RefOID  uint32
}

// HiddenObjectsQuery reads the objects of [ObjectDef]: every type (its name,
// for the casts to types the snapshot does not know), the user operators
// and relations, the views' queries, the row-level security policies'
// expressions (on their relation) and the domains' CHECK constraints (on
// their domain). It only reads the catalog, on any server, PostgreSQL 13
// and later.
const HiddenObjectsQuery = `SELECT 't'::text, t.oid::int8, t.typname::text, NULL::text FROM pg_catalog.pg_type t
UNION ALL SELECT 'o', o.oid::int8, o.oprname::text, NULL FROM pg_catalog.pg_operator o WHERE o.oid >= 16384
UNION ALL SELECT 'r', c.oid::int8, c.relname::text, CASE WHEN c.relkind = 'v' THEN pg_catalog.pg_get_viewdef(c.oid) END
  FROM pg_catalog.pg_class c WHERE c.oid >= 16384 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
UNION ALL SELECT 'r', p.polrelid::int8, NULL, 'SELECT ' || pg_catalog.concat_ws(', ', pg_catalog.pg_get_expr(p.polqual, p.polrelid), pg_catalog.pg_get_expr(p.polwithcheck, p.polrelid))
  FROM pg_catalog.pg_policy p
UNION ALL SELECT 't', k.contypid::int8, NULL, 'SELECT ' || pg_catalog.pg_get_constraintdef(k.oid)
  FROM pg_catalog.pg_constraint k WHERE k.contypid <> 0 AND k.contype = 'c'`

// HiddenEdgesQuery reads the edges of [EdgeDef]: what user functions
// (their bodies, argument and result types), views (their rules),
// policies and domain constraints depend on (pg_depend), and what the
// catalog's columns say the user types, operators, aggregates, casts,
// ranges, default operator classes and relations' columns run. Built-in
// functions that pg_depend leaves out are kept where a user object names
// them (an operator over pg_advisory_lock). It only reads the catalog.
const HiddenEdgesQuery = `WITH dep AS (
  SELECT d.classid, d.objid, d.refobjid,
    CASE d.refclassid WHEN 'pg_catalog.pg_proc'::pg_catalog.regclass THEN 'f'
      WHEN 'pg_catalog.pg_type'::pg_catalog.regclass THEN 't'
      WHEN 'pg_catalog.pg_class'::pg_catalog.regclass THEN 'r'
      ELSE 'o' END AS refkind
  FROM pg_catalog.pg_depend d
  WHERE d.objid >= 16384 AND d.deptype = 'n'
    AND d.refclassid IN ('pg_catalog.pg_proc'::pg_catalog.regclass, 'pg_catalog.pg_type'::pg_catalog.regclass,
      'pg_catalog.pg_class'::pg_catalog.regclass, 'pg_catalog.pg_operator'::pg_catalog.regclass)
    AND d.classid IN ('pg_catalog.pg_proc'::pg_catalog.regclass, 'pg_catalog.pg_rewrite'::pg_catalog.regclass,
      'pg_catalog.pg_policy'::pg_catalog.regclass, 'pg_catalog.pg_constraint'::pg_catalog.regclass)
), touched AS (
  SELECT c.castsource AS t FROM pg_catalog.pg_cast c WHERE c.oid >= 16384 AND c.castcontext <> 'e'
  UNION SELECT c.casttarget FROM pg_catalog.pg_cast c WHERE c.oid >= 16384 AND c.castcontext <> 'e'
  UNION SELECT o.opcintype FROM pg_catalog.pg_opclass o WHERE o.oid >= 16384 AND o.opcdefault
)
SELECT 'f'::text, d.objid::int8, d.refkind, d.refobjid::int8 FROM dep d WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
UNION ALL SELECT 'r', r.ev_class::int8, d.refkind, d.refobjid::int8 FROM dep d
  JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND r.ev_type = '1'
UNION ALL SELECT 'r', p.polrelid::int8, d.refkind, d.refobjid::int8 FROM dep d
  JOIN pg_catalog.pg_policy p ON p.oid = d.objid WHERE d.classid = 'pg_catalog.pg_policy'::pg_catalog.regclass
UNION ALL SELECT 't', k.contypid::int8, d.refkind, d.refobjid::int8 FROM dep d
  JOIN pg_catalog.pg_constraint k ON k.oid = d.objid WHERE d.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass AND k.contypid <> 0
UNION ALL SELECT 'r', a.attrelid::int8, 't', a.atttypid::int8 FROM pg_catalog.pg_attribute a
  JOIN pg_catalog.pg_class c ON c.oid = a.attrelid AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
  WHERE a.attrelid >= 16384 AND a.attnum > 0 AND NOT a.attisdropped AND (a.atttypid >= 16384 OR a.atttypid IN (SELECT t FROM touched))
UNION ALL SELECT 't', t.oid::int8, 'f', f::int8 FROM pg_catalog.pg_type t,
  LATERAL pg_catalog.unnest(ARRAY[t.typinput, t.typoutput, t.typreceive, t.typsend, t.typmodin, t.typmodout]::pg_catalog.oid[]) f
  WHERE t.oid >= 16384 AND f >= 16384
UNION ALL SELECT 't', t.oid::int8, 't', x::int8 FROM pg_catalog.pg_type t, LATERAL pg_catalog.unnest(ARRAY[t.typbasetype, t.typelem]) x
  WHERE t.oid >= 16384 AND x <> 0
UNION ALL SELECT 't', t.oid::int8, 'r', t.typrelid::int8 FROM pg_catalog.pg_type t WHERE t.oid >= 16384 AND t.typrelid <> 0
UNION ALL SELECT 't', r.rngtypid::int8, 'f', f::int8 FROM pg_catalog.pg_range r,
  LATERAL pg_catalog.unnest(ARRAY[r.rngcanonical, r.rngsubdiff]::pg_catalog.oid[]) f WHERE r.rngtypid >= 16384 AND f <> 0
UNION ALL SELECT 't', r.rngtypid::int8, 't', r.rngsubtype::int8 FROM pg_catalog.pg_range r WHERE r.rngtypid >= 16384
UNION ALL SELECT 'o', o.oid::int8, 'f', o.oprcode::pg_catalog.oid::int8 FROM pg_catalog.pg_operator o WHERE o.oid >= 16384 AND o.oprcode <> 0
UNION ALL SELECT 'o', o.oid::int8, 't', x::int8 FROM pg_catalog.pg_operator o, LATERAL pg_catalog.unnest(ARRAY[o.oprleft, o.oprright, o.oprresult]) x
  WHERE o.oid >= 16384 AND x <> 0
UNION ALL SELECT 'f', a.aggfnoid::pg_catalog.oid::int8, 'f', f::int8 FROM pg_catalog.pg_aggregate a,
  LATERAL pg_catalog.unnest(ARRAY[a.aggtransfn, a.aggfinalfn, a.aggcombinefn, a.aggserialfn, a.aggdeserialfn,
    a.aggmtransfn, a.aggminvtransfn, a.aggmfinalfn]::pg_catalog.oid[]) f
  WHERE a.aggfnoid >= 16384 AND f <> 0
UNION ALL SELECT 'f', a.aggfnoid::pg_catalog.oid::int8, 't', x::int8 FROM pg_catalog.pg_aggregate a,
  LATERAL pg_catalog.unnest(ARRAY[a.aggtranstype, a.aggmtranstype]) x WHERE a.aggfnoid >= 16384 AND x <> 0
UNION ALL SELECT CASE c.castcontext WHEN 'e' THEN 'x' ELSE 't' END, c.casttarget::int8, 'f', c.castfunc::int8
  FROM pg_catalog.pg_cast c WHERE c.oid >= 16384 AND c.castfunc <> 0
UNION ALL SELECT 't', c.castsource::int8, 'f', c.castfunc::int8
  FROM pg_catalog.pg_cast c WHERE c.oid >= 16384 AND c.castfunc <> 0 AND c.castcontext <> 'e'
UNION ALL SELECT 't', o.opcintype::int8, 'f', p.amproc::pg_catalog.oid::int8 FROM pg_catalog.pg_opclass o
  JOIN pg_catalog.pg_amproc p ON p.amprocfamily = o.opcfamily WHERE o.oid >= 16384 AND o.opcdefault
UNION ALL SELECT 't', o.opcintype::int8, 'o', p.amopopr::int8 FROM pg_catalog.pg_opclass o
  JOIN pg_catalog.pg_amop p ON p.amopfamily = o.opcfamily WHERE o.oid >= 16384 AND o.opcdefault`

// hiddenKind is what a name in [hidden.names] stands for.
type hiddenKind uint8

const (
	// hkName: a risky type or relation: the name anywhere is risky.
	hkName hiddenKind = 1 << iota
	// hkAttr: a risky function of one argument: the name after a period,
	// not followed by a parenthesis (attribute notation, r.fn), is risky.
	hkAttr
)

// hidden is what SetHidden learnt, in the form the classifier looks up.
type hidden struct {
	names map[string]hiddenKind // folded names of risky objects
	// filter has bit nameBit(n) set for every name of names: most names
	// a statement holds miss it, without a map lookup.
	filter [4]uint64
	ops    []string // symbols of risky operators
	types  []string // every type's name, sorted: for casts
}

// nameBit is the bit of a folded name in hidden.filter.
func nameBit(n []byte) uint {
	if len(n) == 0 {
		return 0
	}
	return (uint(len(n))*31 + uint(n[0])*7 + uint(n[len(n)-1])) & 255
}

// risky reports whether the folded name n is the name of a risky object of
// a kind in want.
func (h *hidden) risky(n []byte, want hiddenKind) bool {
	b := nameBit(n)
	if h.filter[b>>6]&(1<<(b&63)) == 0 {
		return false
	}
	return h.names[string(n)]&want != 0
}

// knownType reports whether the folded name n is the name of a type the
// snapshot holds.
func (h *hidden) knownType(n []byte) bool {
	lo, hi := 0, len(h.types)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if h.types[m] < string(n) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo < len(h.types) && h.types[lo] == string(n)
}

// riskyOpEndingAt reports whether a risky operator's symbol ends at byte
// end of s, inside the run of operator characters that starts at start.
func (h *hidden) riskyOpEndingAt(s string, start, end int) bool {
	for _, op := range h.ops {
		if end-len(op) >= start && s[end-len(op):end] == op {
			return true
		}
	}
	return false
}

// isOpChar reports whether c is a character of an operator's symbol.
func isOpChar(c byte) bool {
	return strings.IndexByte("+-*/<>=~!@#%^&|`?", c) >= 0
}

// objKey is the key of an object in SetHidden's closure.
func objKey(kind byte, oid uint32) uint64 { return uint64(kind)<<32 | uint64(oid) }

// SetHidden makes f know the code that statements run without showing it
// (see the file's comment): objs and edges are the rows of
// [HiddenObjectsQuery] and [HiddenEdgesQuery], funcs the same definitions
// as f was built from (their OIDs link the edges to them). A snapshot
// without it, or before it is called, knows none: only calls by name are
// judged, and a cast to a type is not checked. Call it before f is shared.
func (f *Functions) SetHidden(funcs []FuncDef, objs []ObjectDef, edges []EdgeDef) {
	if f == nil {
		return
	}
	risky := map[uint64]bool{}
	var queue []uint64
	seed := func(k uint64) {
		if !risky[k] {
			risky[k] = true
			queue = append(queue, k)
		}
	}
	// The functions that change the session or write, as a call by name
	// would judge them: a user function by its label (f.defs), a built-in
	// or an extension's by funcClass, a configured write.
	for i := range funcs {
		d := &funcs[i]
		if d.OID == 0 {
			continue
		}
		if funcClass(d.Name) != Read || listed(f.write, d.Schema, d.Name) {
			seed(objKey('f', d.OID))
			continue
		}
		if !f.builtin(d) && (d.Volatile || d.Procedure) && extensionFunctions[d.Extension][d.Name] == extJudged &&
			!listed(f.read, d.Schema, d.Name) {
			seed(objKey('f', d.OID))
		}
	}
	// SQL the object runs whenever it is used: a view's query, a policy's
	// expressions, a domain's constraint.
	for _, o := range objs {
		if o.Text == "" {
			continue
		}
		if Classify(o.Text).Class != Read {
			seed(objKey(o.Kind, o.OID))
		}
	}
	// Close over "may run": an object is risky when it may run a risky one.
	users := map[uint64][]uint64{}
	for _, e := range edges {
		if e.Kind == 'x' {
			continue
		}
		ref := objKey(e.RefKind, e.RefOID)
		users[ref] = append(users[ref], objKey(e.Kind, e.OID))
	}
	for len(queue) > 0 {
		k := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, u := range users[k] {
			seed(u)
		}
	}
	// A read-listed function stays a read whatever it may run: the
	// configuration says so.
	h := &hidden{names: map[string]hiddenKind{}}
	add := func(n string, k hiddenKind) {
		if n == "" {
			return
		}
		h.names[n] |= k
		b := nameBit([]byte(n))
		h.filter[b>>6] |= 1 << (b & 63)
	}
	byOID := make(map[uint32]int, len(f.defs))
	for i, d := range f.defs {
		if d.oid != 0 {
			byOID[d.oid] = i
		}
	}
	for i := range funcs {
		d := &funcs[i]
		if d.OID == 0 || !risky[objKey('f', d.OID)] || listed(f.read, d.Schema, d.Name) {
			continue
		}
		if funcClass(d.Name) != Read {
			continue // a call by name is judged by the curated list
		}
		if j, ok := byOID[d.OID]; ok && !f.defs[j].builtin {
			f.defs[j].risky = true
		}
		if d.Args == 1 {
			add(d.Name, hkAttr)
		}
	}
	ops := map[string]bool{}
	types := make([]string, 0, len(objs))
	for _, o := range objs {
		if o.Kind == 't' && o.Name != "" {
			types = append(types, o.Name)
		}
		if o.Name == "" || !risky[objKey(o.Kind, o.OID)] {
			continue
		}
		switch o.Kind {
		case 't', 'r':
			add(o.Name, hkName)
		case 'o':
			ops[o.Name] = true
		}
	}
	// An explicit cast runs where its target type is named.
	names := map[uint32]string{}
	for _, o := range objs {
		if o.Kind == 't' && o.Name != "" {
			names[o.OID] = o.Name
		}
	}
	for _, e := range edges {
		if e.Kind == 'x' && risky[objKey(e.RefKind, e.RefOID)] {
			add(names[e.OID], hkName)
		}
	}
	for op := range ops {
		h.ops = append(h.ops, op)
	}
	slices.Sort(h.ops)
	slices.Sort(types)
	h.types = slices.Compact(types)
	f.hidden = h
}

// builtin reports whether d is a function of the server itself: in
// pg_catalog or information_schema, and no extension's (an extension may
// install functions in pg_catalog: adminpack's pg_file_write).
func (f *Functions) builtin(d *FuncDef) bool {
	return (d.Schema == "pg_catalog" || d.Schema == "information_schema") && d.Extension == ""
}

// CatalogVersionQuery reads, in one row, a fingerprint of the catalog rows
// that [CatalogQuery], [RelationsQuery], [HiddenObjectsQuery] and
// [HiddenEdgesQuery] read, for user objects (OID from
// FirstNormalObjectID, not temporary): the count, the sum of the
// inserting transaction IDs and the highest OID of each catalog. A CREATE,
// ALTER, DROP or OR REPLACE changes a row's xmin, the count or the highest
// OID, so a snapshot whose fingerprint differs from the catalog's is to be
// read again. Cheap enough to run every probe interval: an index range
// over the user objects of each catalog.
const CatalogVersionQuery = `WITH tmp AS (SELECT n.oid FROM pg_catalog.pg_namespace n
  WHERE n.nspname LIKE 'pg\_temp\_%' OR n.nspname LIKE 'pg\_toast\_temp\_%')
SELECT pg_catalog.concat_ws(' ',
 (SELECT count(*) || '/' || coalesce(sum(x.xmin::text::int8), 0) || '/' || coalesce(max(x.oid::int8), 0) FROM pg_catalog.pg_proc x WHERE x.oid >= 16384),
 (SELECT count(*) || '/' || coalesce(sum(x.xmin::text::int8), 0) || '/' || coalesce(max(x.oid::int8), 0) FROM pg_catalog.pg_type x WHERE x.oid >= 16384 AND x.typnamespace NOT IN (SELECT oid FROM tmp)),
 (SELECT count(*) || '/' || coalesce(sum(x.xmin::text::int8), 0) || '/' || coalesce(max(x.oid::int8), 0) FROM pg_catalog.pg_class x WHERE x.oid >= 16384 AND x.relpersistence <> 't'),
 (SELECT count(*) || '/' || coalesce(sum(x.xmin::text::int8), 0) || '/' || coalesce(max(x.oid::int8), 0) FROM pg_catalog.pg_operator x WHERE x.oid >= 16384),
 (SELECT count(*) || '/' || coalesce(sum(x.xmin::text::int8), 0) || '/' || coalesce(max(x.oid::int8), 0) FROM pg_catalog.pg_cast x WHERE x.oid >= 16384),
 (SELECT count(*) || '/' || coalesce(sum(x.xmin::text::int8), 0) || '/' || coalesce(max(x.oid::int8), 0) FROM pg_catalog.pg_opclass x WHERE x.oid >= 16384),
 (SELECT count(*) || '/' || coalesce(sum(x.xmin::text::int8), 0) || '/' || coalesce(max(x.oid::int8), 0) FROM pg_catalog.pg_rewrite x WHERE x.oid >= 16384),
 (SELECT count(*) || '/' || coalesce(sum(x.xmin::text::int8), 0) || '/' || coalesce(max(x.oid::int8), 0) FROM pg_catalog.pg_policy x WHERE x.oid >= 16384),
 (SELECT count(*) || '/' || coalesce(sum(x.xmin::text::int8), 0) || '/' || coalesce(max(x.oid::int8), 0) FROM pg_catalog.pg_constraint x WHERE x.oid >= 16384 AND x.connamespace NOT IN (SELECT oid FROM tmp)),
 (SELECT count(*) || '/' || coalesce(sum(x.xmin::text::int8), 0) || '/' || coalesce(max(x.oid::int8), 0) FROM pg_catalog.pg_trigger x WHERE x.oid >= 16384))`
