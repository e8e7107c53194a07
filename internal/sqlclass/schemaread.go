package sqlclass

// VersionTables are the version tables of the schema migration tools whose
// reads [SchemaRead] recognises: goose's and golang-migrate's (also
// dbmate's and Rails').
var VersionTables = [...]string{"goose_db_version", "schema_migrations"}

// SchemaRead reports whether sql reads a relation whose content decides a
// schema change, so that a stale answer makes a tool apply a migration
// twice, skip one, or issue DDL that fails:
//
//   - a schema migration tool's version table ([VersionTables]), under
//     any schema, quoted or not;
//   - a relation of the system catalogs: a name qualified by pg_catalog or
//     information_schema, or a pg_ name right after FROM or JOIN (pg_tables,
//     pg_class, pg_stat_activity, ...).
//
// A name followed by a parenthesis is a function call, not a relation:
// pg_catalog.now() and FROM pg_last_wal_replay_lsn() do not count. Names in
// string literals, quoted identifiers other than the version tables, and
// comments do not count either. It does not look at the statement's class:
// the caller asks about reads.
func SchemaRead(sql string) bool {
	if !containsAnyFold(sql) {
		return false
	}
	type tok struct {
		k          tokKind
		start, end int
	}
	l := lexer{s: sql}
	var pp, p, cur tok // the two tokens before cur
	k, s, e := l.next()
	cur = tok{k, s, e}
	for cur.k != tEOF {
		k, s, e := l.next()
		next := tok{k, s, e}
		if isName(cur.k) && next.k != tLParen {
			name := sql[cur.start:cur.end]
			var nameBuf, schemaBuf [maxIdentLen]byte
			if cur.k == tUIdent {
				name = string(l.ident(nameBuf[:0], cur.k, cur.start, cur.end))
			}
			dotBefore := p.k == tOther && sql[p.start] == '.'
			dotAfter := next.k == tOther && sql[next.start] == '.'
			for _, v := range VersionTables {
				if name == v || cur.k == tWord && equalFold(name, v) {
					return true
				}
			}
			if dotBefore && !dotAfter && isName(pp.k) {
				schema := sql[pp.start:pp.end]
				if pp.k == tUIdent {
					schema = string(l.ident(schemaBuf[:0], pp.k, pp.start, pp.end))
				}
				if isCatalogSchema(schema, pp.k != tWord) {
					return true
				}
			}
			if !dotBefore && !dotAfter && cur.k == tWord && p.k == tWord && hasPrefixFold(name, "pg_") {
				if w := sql[p.start:p.end]; equalFold(w, "from") || equalFold(w, "join") {
					return true
				}
			}
		}
		pp, p, cur = p, cur, next
	}
	return false
}

// isCatalogSchema reports whether schema, as written (quoted or not),
// names pg_catalog or information_schema.
func isCatalogSchema(schema string, quoted bool) bool {
	if quoted {
		return schema == "pg_catalog" || schema == "information_schema"
	}
	return equalFold(schema, "pg_catalog") || equalFold(schema, "information_schema")
}

// containsAnyFold is SchemaRead's quick test: whether sql holds, ignoring
// ASCII case, a substring that every statement it recognises holds ("pg_",
// "information_schema" or a version table's name). It does not allocate.
func containsAnyFold(sql string) bool {
	for i := 0; i+3 <= len(sql); i++ {
		switch sql[i] | 0x20 {
		case 'p':
			if hasPrefixFold(sql[i:], "pg_") {
				return true
			}
		case 'i':
			if hasPrefixFold(sql[i:], "information_schema") {
				return true
			}
		case 'g', 's':
			for _, v := range VersionTables {
				if hasPrefixFold(sql[i:], v) {
					return true
				}
			}
		}
	}
	return false
}
