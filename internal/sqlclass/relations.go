package sqlclass

import "slices"

// This file is what a statement reads and writes, relation by relation, as
// far as its text and the catalog tell: the scope of read-your-writes. A
// write's position needs to be seen only by the reads of the relations it
// wrote; a read needs only the positions of the relations it reads.
//
// Conservative wherever the text does not tell. A write counts for every
// relation (a [Scope] not Named) unless it is one INSERT, UPDATE, DELETE or MERGE
// (not a data-modifying WITH) whose target is named, calls no function but
// the built-in ones, and whose target, as the catalog knows it, has no
// trigger, no rule, is referenced by no foreign key with a cascading
// action (ON DELETE or ON UPDATE CASCADE, SET NULL, SET DEFAULT), and is a
// table (not a view or a foreign table). A read needs every relation's
// position unless every relation it reads is named after FROM, JOIN, a
// comma of a FROM list or TABLE, none of them is a view or a foreign
// table, and it calls no function but the built-in ones.
//
// Names resolve as PostgreSQL would, whatever the search_path: a name is
// its base name (an unqualified one matches that name in every schema, so
// the schema of a qualified one is dropped, and every relation of that
// name shares the flags any of them has). A partition and its parents, and
// inheritance children and their parents, are one relation: each name maps
// to its inheritance group. A name the catalog does not know (a table
// created since the snapshot, a temporary table) is written for every
// relation, and read by its name. Two names may share a key (a hash):
// a read then needs the other's writes too, which is safe.

// maxScopeKeys bounds the relations a Scope names; a statement that names
// more counts for every relation.
const maxScopeKeys = 4

// Scope is the relations a statement writes or reads: every relation, or,
// when Named, the N keys of Keys (none: a statement that touches no
// relation). Its zero value is every relation, so that a Scope nobody
// worked out is safe.
type Scope struct {
	Named bool
	N     uint8
	Keys  [maxScopeKeys]uint32
}

// AllRelations is the Scope of every relation.
var AllRelations = Scope{}

// add adds key to s, a Named scope; beyond maxScopeKeys, s becomes every
// relation.
func (s *Scope) add(key uint32) {
	if !s.Named {
		return
	}
	for _, k := range s.Keys[:s.N] {
		if k == key {
			return
		}
	}
	if int(s.N) == maxScopeKeys {
		*s = AllRelations
		return
	}
	s.Keys[s.N] = key
	s.N++
}

// Union adds o's relations to s.
func (s *Scope) Union(o Scope) {
	if !o.Named {
		*s = AllRelations
		return
	}
	for _, k := range o.Keys[:o.N] {
		s.add(k)
	}
}

// NoRelation is the Named Scope of no relation: what Union starts from.
var NoRelation = Scope{Named: true}

// RelationKey is the key of a relation's base name as PostgreSQL stores it
// (folded): what a Scope holds for a relation the catalog does not know.
func RelationKey(name string) uint32 { return relationKey([]byte(name)) }

// relationKey is RelationKey of a name in a buffer (FNV-1a, 32 bits: two
// names that share a key make a read need the other's writes too, which
// is safe).
func relationKey(name []byte) uint32 {
	k := uint32(2166136261)
	for _, c := range name {
		k ^= uint32(c)
		k *= 16777619
	}
	if k == 0 {
		k = 1 // 0 is no key
	}
	return k
}

// RelDef is what the catalog says of one relation (see [RelationsQuery]).
type RelDef struct {
	Name string // relname, as stored
	// Kind is pg_class.relkind: 'r' table, 'p' partitioned table, 'v'
	// view, 'm' materialized view, 'f' foreign table.
	Kind byte
	// Triggers: a user trigger; Rules: a rule beside a view's _RETURN;
	// Cascades: a foreign key with a cascading action references it.
	Triggers, Rules, Cascades bool
	// Parents are the names of the relations it inherits from, or is a
	// partition of.
	Parents []string
}

// RelationsQuery reads the catalog's relations for [Functions.SetRelations]:
// name, kind, triggers, rules, cascades, and the parents' names separated
// by the byte 0x1f. Temporary relations of other sessions and system
// schemas are left out.
const RelationsQuery = `SELECT c.relname, c.relkind::text,
  EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal),
  EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite r WHERE r.ev_class = c.oid AND r.rulename <> '_RETURN'),
  EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k WHERE k.confrelid = c.oid AND k.contype = 'f'
          AND (k.confdeltype IN ('c', 'n', 'd') OR k.confupdtype IN ('c', 'n', 'd'))),
  COALESCE((SELECT string_agg(p.relname, E'\x1f') FROM pg_catalog.pg_inherits i
            JOIN pg_catalog.pg_class p ON p.oid = i.inhparent WHERE i.inhrelid = c.oid), '')
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
  AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'`

// relations is the catalog's relations by base name.
type relations struct {
	names []string  // sorted, distinct
	info  []relInfo // info[i] is names[i]'s
}

// relInfo is what a base name means for a Scope.
type relInfo struct {
	key       uint32 // its inheritance group's key
	readAll   bool   // a read of it needs every relation (a view, a foreign table)
	writesAll bool   // a write to it counts for every relation
}

// SetRelations makes f know the catalog's relations defs: a snapshot
// without them (nil, or before it is called) knows no relation, so every
// write counts for every relation. Call it before f is shared.
func (f *Functions) SetRelations(defs []RelDef) {
	if f == nil {
		return
	}
	// Inheritance groups: union-find over base names.
	parent := map[string]string{}
	var find func(string) string
	find = func(n string) string {
		p, ok := parent[n]
		if !ok || p == n {
			parent[n] = n
			return n
		}
		r := find(p)
		parent[n] = r
		return r
	}
	union := func(a, b string) {
		ra, rb := find(a), find(b)
		if ra == rb {
			return
		}
		if rb < ra {
			ra, rb = rb, ra
		}
		parent[rb] = ra // the smallest name represents the group
	}
	for _, d := range defs {
		find(d.Name)
		for _, p := range d.Parents {
			union(d.Name, p)
		}
	}
	type flags struct{ readAll, writesAll bool }
	byName := map[string]flags{}
	groupWrites := map[string]bool{}
	for _, d := range defs {
		fl := byName[d.Name]
		switch d.Kind {
		case 'v', 'f':
			fl.readAll, fl.writesAll = true, true
		case 'm':
			fl.readAll = true // written only by REFRESH, which is DDL
		}
		if d.Triggers || d.Rules || d.Cascades {
			fl.writesAll = true
		}
		byName[d.Name] = fl
		if fl.writesAll {
			groupWrites[find(d.Name)] = true
		}
	}
	rs := &relations{}
	for n := range byName {
		rs.names = append(rs.names, n)
	}
	slices.Sort(rs.names)
	rs.info = make([]relInfo, len(rs.names))
	for i, n := range rs.names {
		g := find(n)
		fl := byName[n]
		rs.info[i] = relInfo{key: RelationKey(g), readAll: fl.readAll, writesAll: fl.writesAll || groupWrites[g]}
	}
	f.rels = rs
}

// relation returns what the catalog says of base name n, and false when
// it does not know it. It does not allocate.
func (f *Functions) relation(n []byte) (relInfo, bool) {
	if f == nil || f.rels == nil {
		return relInfo{}, false
	}
	names := f.rels.names
	lo, hi := 0, len(names)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if names[m] < string(n) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(names) || names[lo] != string(n) {
		return relInfo{}, false
	}
	return f.rels.info[lo], true
}

// knowsRelations reports whether f holds a snapshot of the relations.
func (f *Functions) knowsRelations() bool { return f != nil && f.rels != nil }

// scopes finds the relations the statement sql, classified r, reads and
// writes (see the file's comment); fn is the catalog snapshot. A text
// whose extent depends on standard_conforming_strings (ambiguous) counts
// for every relation. It does not allocate.
func scopes(sql string, r *Result, fn *Functions, ambiguous bool) {
	r.Reads, r.Writes = AllRelations, AllRelations
	if r.Statements != 1 || r.userCall || ambiguous || !fn.knowsRelations() {
		return
	}
	var p relPass
	p.lx = lexer{s: sql}
	p.reads, p.writes = NoRelation, NoRelation
	p.fn = fn
	p.run()
	if p.all || p.lx.unterminated {
		return
	}
	switch {
	case r.Class == Read:
		r.Reads = p.reads
	case r.DML && p.target:
		r.Writes = p.writes
	}
}

// relPass is the scan of one statement for the relations it names.
type relPass struct {
	lx lexer
	fn *Functions

	reads, writes Scope
	target        bool // the DML's target was named (writes holds it)
	all           bool // the text does not name every relation

	depth int
	// fromAt has bit d set while a FROM list is open at depth d: a comma
	// there starts another item.
	fromAt uint64
	// expect: the next token is a FROM item (after FROM, JOIN, a comma of
	// a FROM list, TABLE); expectTarget: it is the DML's target.
	expect       bool
	expectTarget bool
	first        bool    // the statement's first word was seen
	with         bool    // the statement begins with WITH
	dml          dmlKind // the statement's DML, by its first word
}

// dmlKind is a DML statement's first word: where its target is named.
type dmlKind uint8

const (
	dmlNone   dmlKind = iota
	dmlInto           // INSERT INTO t, MERGE INTO t
	dmlFrom           // DELETE FROM t
	dmlUpdate         // UPDATE t
)

func (p *relPass) run() {
	for !p.all {
		k, a, b := p.lx.next()
		switch k {
		case tEOF, tSemi:
			return
		case tLParen:
			if p.expectTarget || p.depth >= 63 {
				p.all = true
				return
			}
			p.depth++
			// (SELECT …), or a parenthesised join whose first item comes
			// next: FROM (a JOIN b ON …).
			p.fromAt &^= 1 << p.depth
			if p.expect {
				p.fromAt |= 1 << p.depth
			}
			continue
		case tRParen:
			p.fromAt &^= 1 << p.depth
			if p.depth > 0 {
				p.depth--
			}
			p.expect = false
			continue
		case tWord:
			if p.word(p.lx.s[a:b]) {
				continue
			}
		case tQIdent:
		case tOther:
			if p.lx.s[a] == ',' && p.fromAt&(1<<p.depth) != 0 {
				p.expect = true
				continue
			}
			if p.expect || p.expectTarget {
				p.all = true // FROM *, FROM @x: not a relation
			}
			continue
		default:
			if p.expect || p.expectTarget {
				p.all = true // a string, a number, a parameter as a FROM item
			}
			continue
		}
		if p.expect || p.expectTarget {
			p.name(k, a, b)
		}
	}
}

// word handles a word and reports whether it was a key word that matters
// here (else it may be a FROM item's name).
func (p *relPass) word(w string) bool {
	if (p.expect || p.expectTarget) && (equalFold(w, "only") || equalFold(w, "lateral")) ||
		p.expect && equalFold(w, "table") {
		return true // FROM ONLY t, JOIN LATERAL (…), (TABLE t)
	}
	if !p.first {
		p.first = true
		switch {
		case equalFold(w, "with"):
			p.with = true
			return true
		case equalFold(w, "table"):
			p.expect = true
			return true
		case equalFold(w, "insert"), equalFold(w, "merge"):
			p.dml = dmlInto
			return true
		case equalFold(w, "delete"):
			p.dml = dmlFrom
			return true
		case equalFold(w, "update"):
			p.dml, p.expectTarget = dmlUpdate, true
			return true
		}
	}
	if p.with && (equalFold(w, "insert") || equalFold(w, "update") || equalFold(w, "delete") || equalFold(w, "merge")) {
		// A data-modifying CTE, or DML after WITH: its targets are not
		// followed here.
		p.all = true
		return true
	}
	switch {
	case equalFold(w, "into") && p.dml == dmlInto && !p.target:
		p.expectTarget = true
		return true
	case equalFold(w, "from") && p.dml == dmlFrom && !p.target:
		p.expectTarget = true
		return true
	case equalFold(w, "from"), equalFold(w, "using") && p.target:
		// A FROM list; DELETE … USING t, MERGE … USING t read t.
		p.fromAt |= 1 << p.depth
		p.expect = true
		return true
	case equalFold(w, "join"):
		p.expect = true
		return true
	case isClauseWord(w):
		p.fromAt &^= 1 << p.depth
		p.expect = false
		return true
	}
	return false
}

// clauseWords end a FROM list at their depth. (ON does not: a comma after
// a join's condition starts another item.)
var clauseWords = [...]string{"where", "group", "having", "window", "order", "limit", "offset", "fetch", "for", "union", "intersect", "except", "returning", "set", "values", "select", "when", "then"}

// isClauseWord reports whether w ends a FROM list.
func isClauseWord(w string) bool {
	for _, c := range clauseWords {
		if equalFold(w, c) {
			return true
		}
	}
	return false
}

// name takes the FROM item or DML target that starts at the token (k, a,
// b): a relation's name, possibly qualified. What is not one (a function
// in FROM, a name written with Unicode escapes) sets p.all.
func (p *relPass) name(k tokKind, a, b int) {
	target := p.expectTarget
	p.expect, p.expectTarget = false, false
	var buf [maxIdentLen]byte
	base := fold(buf[:0], p.lx.s[a:b], k == tQIdent)
	for {
		save := p.lx
		k2, a2, _ := p.lx.next()
		switch {
		case k2 == tOther && p.lx.s[a2] == '.':
			// A qualified name: the last part is the base name.
			k3, a3, b3 := p.lx.next()
			if k3 != tWord && k3 != tQIdent {
				p.all = true
				return
			}
			base = fold(buf[:0], p.lx.s[a3:b3], k3 == tQIdent)
			continue
		case k2 == tLParen && !target:
			// A function in FROM (a table function): it may read
			// anything. (After a DML target, the column list.)
			p.all = true
			return
		case k2 == tOther && p.lx.s[a2] == '&':
			// U&"…": a name written with Unicode escapes.
			p.all = true
			return
		}
		p.lx = save
		break
	}
	if len(base) == 0 {
		p.all = true
		return
	}
	info, known := p.fn.relation(base)
	key := relationKey(base)
	if known {
		key = info.key
	}
	switch {
	case target && (!known || info.writesAll):
		p.all = true
	case target:
		p.writes.add(key)
		p.target = true
	case known && info.readAll:
		p.all = true
	default:
		p.reads.add(key)
	}
}
