package sqlclass

// Classify classifies the SQL text sql, which may hold several statements
// separated by semicolons, and reads the routing hint of a leading comment.
// It never fails: text it cannot make sense of is [Unknown]. The rules are
// in the package documentation.
//
// Classify makes a single pass over sql and does not allocate. Only when a
// standard '…' string holds a backslash does it make a second pass, to
// read the text also as a server with standard_conforming_strings = off
// would, and it returns the more dangerous of the two readings.
func Classify(sql string) Result {
	return ClassifyWith(sql, nil)
}

// ClassifyWith is [Classify] that also judges the functions the statement
// calls by what fn knows of them (see "User functions" in the package
// documentation). With a nil fn it is Classify. It does not allocate.
func ClassifyWith(sql string, fn *Functions) Result {
	var c classifier
	c.fn = fn
	c.run(sql, false)
	r := c.res
	if c.lx.backslashSeen {
		var c2 classifier
		c2.fn = fn
		c2.run(sql, true)
		r2 := c2.res
		r.Class = r.Class.max(r2.Class)
		r.seen |= r2.seen
		if r2.Statements > r.Statements {
			r.Statements = r2.Statements
		}
		r.DML = r.DML && r2.DML && r.Statements == 1
		r.ChangesCatalog = r.ChangesCatalog || r2.ChangesCatalog
		r.WritesNothing = r.WritesNothing && r2.WritesNothing && r.Statements == 1
		if r2.Func > r.Func {
			r.Func, r.FuncStart, r.FuncEnd = r2.Func, r2.FuncStart, r2.FuncEnd
		}
		r.userCall = r.userCall || r2.userCall
	}
	scopes(sql, &r, fn, c.lx.backslashSeen)
	return r
}

// phase is where the classifier stands inside one statement.
type phase uint8

const (
	phStart        phase = iota // before the first key word; opening parentheses are skipped
	phBody                      // the rest of a statement
	phIgnore                    // the rest of the statement cannot change its class
	phSet                       // just after SET
	phCreate                    // after CREATE and its modifiers (OR REPLACE, TEMP, …)
	phPrepare                   // just after PREPARE
	phExplain                   // after EXPLAIN, before the explained statement
	phExplainParen              // after "EXPLAIN (": an option list, or a parenthesised statement
	phExplainOpts               // inside the option list of EXPLAIN
)

// stmt is the state of the statement being classified.
type stmt struct {
	class    Class
	ph       phase
	nonEmpty bool

	read    bool // a read: look for DML, INTO and FOR UPDATE
	dml     bool // starts with INSERT, UPDATE, DELETE, MERGE or WITH
	create  bool // a CREATE: look for pg_temp
	analyze bool // EXPLAIN ANALYZE: the explained statement runs

	pendFor  bool // the previous word was FOR
	pendInto bool // after INTO [UNLOGGED] [TABLE]
	optDepth int  // parentheses open in the EXPLAIN option list

	prev      tokKind // previous token in phBody, for function calls
	prevStart int
	prevEnd   int
	prev2     tokKind // the token before prev
	prev2At   int     // its span
	prev2End  int

	// What comes before the dotted name (a, a.b, a.b.c) that ends at prev:
	// an alias list (AS t(…), FROM t x(…)), a type modifier
	// (::numeric(10,2)) or the column list of INSERT INTO t (…) are not
	// function calls.
	before      tokKind
	beforeStart int
	beforeEnd   int
	schemaKind  tokKind // tWord, tQIdent or tUIdent when the name is qualified
	schemaStart int
	schemaEnd   int

	calls   bool // a query or DML: the functions it calls are judged
	catalog bool // CREATE, ALTER, DROP, DO or CALL: may change the catalog
	quiet   bool // SET, RESET, LISTEN, UNLISTEN or DEALLOCATE: writes nothing (Result.WritesNothing)
	depth   int  // parentheses open in the body
	// withMask has bit d set while a WITH list is open at depth d, whose
	// next word is a CTE name when cteNext is set; the column list after a
	// CTE name is not a call.
	withMask uint64
	cteNext  bool
	cteAt    int // start of the last CTE name, or -1

	userCall bool // a call that may read relations the text does not name

	// Code the text does not show as a call (hidden.go).
	opStart, opEnd int  // the run of operator characters that ends at opEnd
	afterDot       bool // the name at prev follows a period
	settings       bool // the statement names pg_settings

	fv     FuncVerdict // the most dangerous verdict on a call so far
	fa, fb int         // the span of that function's name
}

type classifier struct {
	lx  lexer
	st  stmt
	res Result
	fn  *Functions
}

func (c *classifier) run(sql string, backslashQuotes bool) {
	c.lx = lexer{s: sql, backslashQuotes: backslashQuotes}
	c.res = Result{Class: Read}
	c.st.cteAt = -1
	for {
		k, a, b := c.lx.next()
		if k == tEOF {
			break
		}
		if k == tSemi {
			c.endStmt()
			continue
		}
		c.st.nonEmpty = true
		c.token(k, a, b)
	}
	if c.lx.unterminated {
		// The server rejects the whole input; but what the unterminated
		// construct swallowed is not known to be harmless, so it is not a
		// read.
		c.st.nonEmpty = true
		c.st.class = c.st.class.max(Unknown)
	}
	c.endStmt()
	c.res.Hint = c.lx.hint
}

func (c *classifier) endStmt() {
	st := &c.st
	if st.ph == phBody {
		c.nameEnd(tEOF)
	}
	if st.settings && st.class == Write {
		// UPDATE pg_settings SET setting = …: its rule calls
		// set_config(…, false), for the session.
		st.class = Session
	}
	if st.nonEmpty {
		c.res.Statements++
		c.res.seen |= 1 << st.class
		c.res.Class = c.res.Class.max(st.class)
		c.res.DML = c.res.Statements == 1 && st.dml && st.class == Write
		c.res.ChangesCatalog = c.res.ChangesCatalog || st.catalog
		c.res.WritesNothing = c.res.Statements == 1 && st.quiet
		if st.fv > c.res.Func {
			c.res.Func, c.res.FuncStart, c.res.FuncEnd = st.fv, st.fa, st.fb
		}
		c.res.userCall = c.res.userCall || st.userCall
	}
	*st = stmt{cteAt: -1}
}

func (c *classifier) token(k tokKind, a, b int) {
	st := &c.st
	switch st.ph {
	case phStart:
		switch k {
		case tLParen:
			// ((SELECT 1)): skip opening parentheses.
		case tWord:
			w := c.lx.s[a:b]
			st.catalog = equalFold(w, "create") || equalFold(w, "alter") || equalFold(w, "drop") ||
				equalFold(w, "do") || equalFold(w, "call")
			st.quiet = equalFold(w, "set") || equalFold(w, "reset") || equalFold(w, "listen") ||
				equalFold(w, "unlisten") || equalFold(w, "deallocate")
			c.dispatch(keywordOf(w))
		default:
			// Every statement starts with a key word: this one is not
			// known, but its function calls are still looked at.
			st.class = Unknown
			st.ph = phBody
			c.body(k, a, b)
		}

	case phBody:
		c.body(k, a, b)

	case phIgnore:

	case phSet:
		if k == tWord && !c.dotNext() {
			// (SET local.tenant = …, SET transaction.x = …: a custom
			// setting whose prefix is one of these words, for the
			// session.)
			switch keywordOf(c.lx.s[a:b]) {
			case kwLocal, kwConstraints:
				// SET LOCAL and SET CONSTRAINTS last until the end of
				// the transaction: in autocommit they do nothing but
				// warn, so they need the primary but no pin.
				st.class = Write
			case kwTransaction:
				st.class = Tx
			}
		}
		st.ph = phBody
		c.body(k, a, b)

	case phCreate:
		if k == tWord {
			switch keywordOf(c.lx.s[a:b]) {
			case kwTemp:
				st.class = Session
				return
			case kwCreateModifier, kwLocal, kwGlobal, kwUnlogged:
				return
			}
		}
		st.ph = phBody
		c.body(k, a, b)

	case phPrepare:
		if k == tWord && keywordOf(c.lx.s[a:b]) == kwTransaction {
			st.class = Tx
		}
		st.ph = phBody
		c.body(k, a, b)

	case phExplain:
		switch k {
		case tWord:
			switch kw := keywordOf(c.lx.s[a:b]); kw {
			case kwAnalyze:
				st.analyze = true
				st.class = Unknown // until the explained statement says more
			case kwVerbose:
			default:
				c.explained(kw)
			}
		case tLParen:
			st.ph = phExplainParen
		default:
			c.explained(kwNone)
		}

	case phExplainParen:
		// "EXPLAIN (" opens either the option list or a parenthesised
		// statement: EXPLAIN (SELECT 1). Options are never key words that
		// start a statement.
		switch k {
		case tLParen:
			// EXPLAIN ((SELECT 1)): a parenthesised statement.
			st.ph = phStart
		case tWord:
			if kw := keywordOf(c.lx.s[a:b]); kw == kwSelect || kw == kwValues || kw == kwWith || kw == kwTable {
				c.explained(kw)
				return
			}
			st.ph = phExplainOpts
			st.optDepth = 1
			c.token(k, a, b)
		default:
			st.ph = phExplainOpts
			st.optDepth = 1
			c.token(k, a, b)
		}

	case phExplainOpts:
		switch k {
		case tLParen:
			st.optDepth++
		case tRParen:
			st.optDepth--
			if st.optDepth == 0 {
				st.ph = phExplain
			}
		case tWord, tQIdent, tUIdent:
			// ANALYZE, or ANALYZE with any value (even false: a
			// conservative reading); also "analyze" quoted, which the
			// option list accepts as a name, and U&"\0061nalyze", whose
			// escapes are decoded first.
			var buf [maxIdentLen]byte
			w := c.lx.ident(buf[:0], k, a, b)
			if equalFold(string(w), "analyze") || equalFold(string(w), "analyse") {
				st.analyze = true
				st.class = Unknown
			}
		}
	}
}

// explained is called at the first token of the statement that an EXPLAIN
// explains, whose key word is kw. The statement is judged as if on its
// own, with or without ANALYZE: with it, the statement runs; without it,
// the planner still runs the functions it folds into constants (those
// labelled IMMUTABLE, whatever they do), and the name of what runs hidden
// code is in the text either way.
func (c *classifier) explained(kw keyword) {
	st := &c.st
	if kw == kwNone {
		st.class = Unknown
		st.ph = phIgnore
		return
	}
	st.ph = phStart
	c.dispatch(kw)
}

// dispatch starts the classification of a statement from its first key
// word.
func (c *classifier) dispatch(kw keyword) {
	st := &c.st
	st.ph = phBody
	switch kw {
	case kwSelect, kwValues, kwTable, kwWith:
		st.class = Read
		st.read = true
		st.calls = true
		st.dml = kw == kwWith
		if kw == kwWith {
			st.openWith()
		}
	case kwShow:
		st.class = Read
		st.ph = phIgnore
	case kwExplain:
		st.class = Read
		st.ph = phExplain
	case kwInsert, kwUpdate, kwDelete, kwMerge:
		st.class = Write
		st.dml = true
		st.calls = true
	case kwWrite, kwAnalyze:
		st.class = Write
	case kwLock:
		st.class = Lock
	case kwSet:
		st.class = Session
		st.ph = phSet
	case kwCreate:
		st.class = Write
		st.create = true
		st.ph = phCreate
	case kwPrepare:
		st.class = Session
		st.ph = phPrepare
	case kwSession:
		st.class = Session
	case kwTx:
		st.class = Tx
	default:
		st.class = Unknown
	}
}

// body looks at a token in the body of a statement: function calls in any
// statement, and in a read the words that make it something else.
func (c *classifier) body(k tokKind, a, b int) {
	st := &c.st
	s := c.lx.s
	if isName(st.prev) && !(k == tOther && s[a] == '.') {
		c.nameEnd(k)
	}
	if isName(k) {
		c.name(k, a, b)
	} else if k == tOther && st.calls && c.fn != nil && c.fn.hidden != nil && isOpChar(s[a]) {
		if a != st.opEnd {
			st.opStart = a
		}
		st.opEnd = b
		if c.fn.hidden.riskyOpEndingAt(s, st.opStart, b) {
			c.hiddenCode(st.opStart, b)
		}
	}
	switch k {
	case tLParen:
		if isName(st.prev) {
			name := s[st.prevStart:st.prevEnd]
			var buf [maxIdentLen]byte
			if st.prev == tUIdent {
				name = string(c.lx.ident(buf[:0], st.prev, st.prevStart, st.prevEnd))
			}
			st.class = st.class.max(funcClass(name))
			if c.fn != nil && st.calls {
				c.call()
			}
		}
		st.pendFor, st.pendInto = false, false
		st.depth++
	case tRParen:
		if st.depth > 0 {
			st.depth--
		}
		st.pendFor, st.pendInto = false, false
	case tWord:
		if c.fn != nil && st.calls {
			c.withWord(s[a:b], a)
		}
		if st.read || st.create {
			c.word(s[a:b])
		}
	case tQIdent, tUIdent:
		if c.fn != nil && st.calls && st.cteNext && st.inWith() {
			st.cteNext, st.cteAt = false, a
		}
		var buf [maxIdentLen]byte
		if (st.pendInto || st.create) && isPgTemp(string(c.lx.ident(buf[:0], k, a, b))) {
			st.class = st.class.max(Session)
		}
		st.pendFor, st.pendInto = false, false
	case tOther:
		if s[a] == ',' && st.inWith() {
			st.cteNext = true
		}
		st.pendFor, st.pendInto = false, false
	default:
		st.pendFor, st.pendInto = false, false
	}
	if isName(k) {
		if st.prev == tOther && s[st.prevStart] == '.' && isName(st.prev2) {
			// The next part of a dotted name: what came before it stays.
			st.schemaKind, st.schemaStart, st.schemaEnd = st.prev2, st.prev2At, st.prev2End
		} else {
			st.before, st.beforeStart, st.beforeEnd = st.prev, st.prevStart, st.prevEnd
			st.schemaKind = tEOF
		}
	}
	st.prev2, st.prev2At, st.prev2End = st.prev, st.prevStart, st.prevEnd
	st.prev, st.prevStart, st.prevEnd = k, a, b
}

// dotNext reports whether the token after the current one is a period.
func (c *classifier) dotNext() bool {
	lx := c.lx
	k, a, _ := lx.next()
	return k == tOther && lx.s[a] == '.'
}

// name looks at a name token of the body: pg_settings, and the names of
// objects that run hidden code (hidden.go).
func (c *classifier) name(k tokKind, a, b int) {
	st := &c.st
	s := c.lx.s
	st.afterDot = st.prev == tOther && s[st.prevStart] == '.'
	if b-a == len("pg_settings") && (k != tWord || equalFold(s[a:b], "pg_settings")) {
		var buf [maxIdentLen]byte
		if string(c.lx.ident(buf[:0], k, a, b)) == "pg_settings" {
			st.settings = true
		}
	}
	if !st.calls || c.fn == nil || c.fn.hidden == nil {
		return
	}
	h := c.fn.hidden
	if k == tWord && b-a < maxIdentLen {
		// The filter's bit from the word itself, folded on the fly: most
		// words miss it and are never copied.
		bit := (uint(b-a)*31 + uint(lower(s[a]))*7 + uint(lower(s[b-1]))) & 255
		if h.filter[bit>>6]&(1<<(bit&63)) == 0 {
			return
		}
	}
	var buf [maxIdentLen]byte
	if h.risky(c.lx.ident(buf[:0], k, a, b), hkName) {
		c.hiddenCode(a, b)
	}
}

// nameEnd is called at the token next after a (possibly dotted) name that
// ends at prev: a function's name after a period is a call in attribute
// notation (r.fn) unless a parenthesis follows, and the name after x:: is
// a type the snapshot must know.
func (c *classifier) nameEnd(next tokKind) {
	st := &c.st
	if !st.calls || c.fn == nil || c.fn.hidden == nil || !isName(st.prev) {
		return
	}
	h := c.fn.hidden
	s := c.lx.s
	attr := st.afterDot && next != tLParen
	cast := st.before == tOther && s[st.beforeStart] == ':' && st.beforeStart > 0 && s[st.beforeStart-1] == ':'
	if !attr && !cast {
		return // most names: nothing to look up
	}
	var buf [maxIdentLen]byte
	n := c.lx.ident(buf[:0], st.prev, st.prevStart, st.prevEnd)
	if attr && h.risky(n, hkAttr) {
		c.hiddenCode(st.prevStart, st.prevEnd)
	}
	if cast && !(st.prev == tWord && isKeyword(s[st.prevStart:st.prevEnd])) && !h.knownType(n) {
		// x::t for a type t the snapshot does not hold (created since,
		// or a temporary one): what its functions do is not known.
		if FuncUnknown > st.fv {
			st.fv, st.fa, st.fb = FuncUnknown, st.prevStart, st.prevEnd
		}
		st.class = st.class.max(Session)
	}
}

// hiddenCode notes that the object named at [a, b) runs code that may
// write or change the session.
func (c *classifier) hiddenCode(a, b int) {
	st := &c.st
	if FuncHidden > st.fv {
		st.fv, st.fa, st.fb = FuncHidden, a, b
	}
	st.class = st.class.max(Session)
}

// lower is c in ASCII lower case.
func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// openWith notes a WITH list opened at the current depth.
func (st *stmt) openWith() {
	if st.depth < 64 {
		st.withMask |= 1 << st.depth
		st.cteNext = true
	}
}

// inWith reports whether a WITH list is open at the current depth.
func (st *stmt) inWith() bool {
	return st.depth < 64 && st.withMask&(1<<st.depth) != 0
}

// withWord follows WITH lists: a WITH right after an opening parenthesis
// opens one; in one, the word after WITH [RECURSIVE] or after a comma is a
// CTE name, and the key word of the main statement closes it.
func (c *classifier) withWord(w string, at int) {
	st := &c.st
	if st.prev == tLParen && equalFold(w, "with") {
		st.openWith()
		return
	}
	if !st.inWith() {
		return
	}
	if st.cteNext {
		if !equalFold(w, "recursive") {
			st.cteNext, st.cteAt = false, at
		}
		return
	}
	switch keywordOf(w) {
	case kwSelect, kwValues, kwTable, kwInsert, kwUpdate, kwDelete, kwMerge:
		st.withMask &^= 1 << st.depth
	}
}

// call judges a call of the function whose name ends at prev.
func (c *classifier) call() {
	st := &c.st
	s := c.lx.s
	if st.prevStart == st.cteAt {
		return // WITH t(a, b) AS …: the columns of a CTE
	}
	switch st.before {
	case tRParen, tQIdent, tUIdent:
		return // FROM (SELECT …) s(a), FROM "t" x(a): an alias list
	case tOther:
		// x::numeric(10,2) is a type modifier, and f(…)[1] x(…) is not
		// SQL; but a single colon is no cast: JSON_OBJECT('k': f(…))
		// (PostgreSQL 16), a[1:f(…)] call f.
		if b := s[st.beforeStart]; b == ':' && st.beforeStart > 0 && s[st.beforeStart-1] == ':' || b == ']' {
			return
		}
	case tWord:
		w := s[st.beforeStart:st.beforeEnd]
		if equalFold(w, "as") || equalFold(w, "into") {
			return // AS t(a, b), CAST(x AS t(3)), INSERT INTO t (a, b)
		}
		if !isKeyword(w) {
			return // FROM t x(a, b): an alias list
		}
	}
	var nameBuf, schemaBuf [maxIdentLen]byte
	name := c.lx.ident(nameBuf[:0], st.prev, st.prevStart, st.prevEnd)
	var schema []byte
	if st.schemaKind != tEOF {
		schema = c.lx.ident(schemaBuf[:0], st.schemaKind, st.schemaStart, st.schemaEnd)
	}
	if !st.userCall && c.fn.userFunction(string(schema), string(name), st.prev == tWord) {
		st.userCall = true // it may read what the text does not name (relations.go)
	}
	if v := c.fn.judge(string(schema), string(name), st.prev == tWord); v > st.fv {
		st.fv, st.fa, st.fb = v, st.prevStart, st.prevEnd
		st.class = st.class.max(v.class())
	}
}

// isKeyword reports whether w is a key word of PostgreSQL's grammar,
// ignoring ASCII case.
func isKeyword(w string) bool {
	var buf [maxIdentLen]byte
	_, ok := sqlKeywords[string(fold(buf[:0], w, false))]
	return ok
}

// word looks at a word in the body of a read or a CREATE statement.
func (c *classifier) word(w string) {
	st := &c.st
	if st.create {
		if isPgTemp(w) {
			// CREATE TABLE pg_temp.t …: a temporary object.
			st.class = st.class.max(Session)
		}
		return
	}
	kw := bodyKeyword(w)
	if st.pendFor {
		st.pendFor = false
		if kw == kwUpdate || kw == kwLockStrength {
			// FOR UPDATE, FOR NO KEY UPDATE, FOR SHARE, FOR KEY SHARE.
			st.class = st.class.max(Lock)
		}
	}
	if st.pendInto {
		switch {
		case kw == kwTemp || isPgTemp(w):
			// SELECT … INTO [LOCAL|GLOBAL] TEMP t, INTO pg_temp.t: a
			// temporary table.
			st.class = st.class.max(Session)
			st.pendInto = false
		case kw == kwTable || kw == kwUnlogged || kw == kwLocal || kw == kwGlobal:
			// INTO [LOCAL|GLOBAL] TEMP|TEMPORARY [TABLE], INTO UNLOGGED
			// [TABLE], INTO TABLE (gram.y's OptTempTableName).
		default:
			st.pendInto = false
		}
	}
	switch kw {
	case kwInsert, kwUpdate, kwDelete, kwMerge:
		// A data-modifying CTE, or the main statement after WITH.
		st.class = st.class.max(Write)
	case kwInto:
		// SELECT … INTO creates a table; INSERT INTO and MERGE INTO are
		// writes already.
		st.class = st.class.max(Write)
		st.pendInto = true
	case kwFor:
		st.pendFor = true
	}
}
