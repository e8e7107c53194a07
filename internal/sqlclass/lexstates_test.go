package sqlclass

import (
	"strings"
	"testing"
)

// scanStates are the start conditions of PostgreSQL's lexer
// (src/backend/parser/scan.l, PostgreSQL 15), and the rules that leave
// INITIAL without one or fail to enter one: the lexer follows each of
// them (lexer.go), and lexerStateTests has cases of each.
var scanStates = []string{
	"INITIAL",      // key words, identifiers, numbers, operators, -- comments
	"xc",           // /* */ comments, nested
	"xd",           // "quoted identifiers"
	"xui",          // U&"quoted identifiers" with Unicode escapes
	"uescape",      // the UESCAPE 'c' clause after a U& token (parser.c)
	"xq",           // '…' with standard_conforming_strings on
	"xqs",          // after a closing quote: {quotecontinue} or not
	"xe",           // E'…' (and '…' with standard_conforming_strings off)
	"xeu",          // E'…' between the halves of a UTF-16 surrogate pair
	"xb",           // B'…'
	"xh",           // X'…'
	"xn",           // N'…': the key word NCHAR, then a '…' string
	"xus",          // U&'…' with Unicode escapes
	"xufailed",     // U& without a quote: the identifier u and &
	"xdolq",        // $tag$…$tag$
	"dolqfailed",   // $tag without a closing $: a lone $
	"param",        // $1
	"scs-off",      // the second reading, standard_conforming_strings off
	"unterminated", // input that ends inside any of the above
}

// lexerStateTests are statements that each exercise one state of scan.l,
// with their class and, where it is given, the kinds of their tokens (see
// tokenKinds). The statements that disguise session state as a read are
// among them: each was seen to change the session on PostgreSQL 15 (see
// TestDisguisedSessionState in the root package).
var lexerStateTests = []struct {
	state string
	sql   string
	want  Class
	toks  string // the tokens as tokenKinds writes them; "" not checked
}{
	{"INITIAL", "SELECT 1; SELECT 2", Read, "W N ; W N"},
	{"INITIAL", "SELECT a$b$c, _x1 FROM t", Read, "W W O W W W"},
	{"INITIAL", "SELECT 1 +-- c\n2", Read, "W N O N"},
	{"INITIAL", "SELECT \"a\" -- ' \n, set_config('a', 'b', false)", Session, ""},
	{"INITIAL", "SELECT 1 -- \r, set_config('a', 'b', false)", Session, ""},

	{"xc", "/* a /* b */ ' */ SELECT set_config('a', 'b', false)", Session, "W W ( S O S O W )"},
	{"xc", "SELECT 1 /* /* */ , set_config('a', 'b', false) */", Read, "W N"},
	{"xc", "SELECT 1 /**/ , set_config('a', 'b', false)", Session, ""},
	{"xc", "SELECT 1 /*/ , set_config('a', 'b', false) */", Read, "W N"},
	{"xc", "SELECT 1 /* a **/ , set_config('a', 'b', false)", Session, ""},

	{"xd", "SELECT \"a\"\"b', set_config('x', 'y', false) --\" FROM t", Read, "W Q W W"},
	{"xd", "SELECT \"set_config\"('a', 'b', false)", Session, "W Q ( S O S O W )"},
	{"xd", "SELECT * INTO \"pg_temp\".t FROM s", Session, ""},

	{"xui", "SELECT U&\"\\0073et_config\"('a', 'b', false)", Session, "W U ( S O S O W )"},
	{"xui", "SELECT u&\"\\+000073et_config\"('a', 'b', false)", Session, ""},
	{"xui", "SELECT pg_catalog.U&\"set\\005fconfig\"('a', 'b', false)", Session, ""},
	{"xui", "SELECT U&\"a\"\"b\" FROM t", Read, "W U W W"},
	{"xui", "SELECT U&\"\\D83D\\DE00\"(1)", Read, ""},
	{"xui", "SELECT U&\"set\\\\_config\"('a', 'b', false)", Read, ""},
	{"xui", "EXPLAIN (U&\"\\0061nalyze\") SELECT set_config('app.tenant', 'evil', false)", Session, ""},
	{"xui", "EXPLAIN (U&\"\\0061nalyse\", COSTS OFF) DELETE FROM t", Write, ""},
	{"xui", "EXPLAIN (U&\"\\0061nalyzer\") DELETE FROM t", Write, ""},
	{"xui", "SELECT * INTO U&\"pg\\005ftemp\".t FROM s", Session, ""},
	{"xui", "SELECT * INTO U&\"pg\\005Ftemp\".t FROM s", Session, ""},

	{"uescape", "SELECT U&\"!0073et_config\" UESCAPE '!' ('a', 'b', false)", Session, "W U ( S O S O W )"},
	{"uescape", "SELECT U&\"!0073et_config\" /* c */ uescape -- c\n '!' ('a', 'b', false)", Session, ""},
	{"uescape", "EXPLAIN (U&\"!0061nalyze\" UESCAPE E'\\041') SELECT set_config('a', 'b', false)", Session, ""},
	{"uescape", "EXPLAIN (U&\"!0061nalyze\" UESCAPE E'\\x21') SELECT set_config('a', 'b', false)", Session, ""},
	{"uescape", "EXPLAIN (U&\"!0061nalyze\" UESCAPE $$!$$) SELECT set_config('a', 'b', false)", Session, ""},
	{"uescape", "EXPLAIN (U&\"!0061nalyze\" UESCAPE $e$!$e$) SELECT set_config('a', 'b', false)", Session, ""},
	{"uescape", "EXPLAIN (U&\"!0061nalyze\" UESCAPE '!'\n'') SELECT set_config('a', 'b', false)", Session, ""},
	{"uescape", "EXPLAIN (U&\"\\0061nalyze\" UESCAPE '!') SELECT set_config('a', 'b', false)", Session, ""},
	{"uescape", "SELECT U&'d!0061t' UESCAPE '!' FROM t", Read, "W S W W"},
	{"uescape", "SELECT U&'x' UESCAPE '!' , set_config('a', 'b', false)", Session, ""},
	{"uescape", "SELECT U&\"x\" UESCAPE 'abc", Unknown, ""},

	{"xq", "SELECT 'it''s; DELETE FROM t'", Read, "W S"},
	{"xq", "SELECT 'a'\n'b'", Read, "W S"},
	{"xq", "SELECT 'a' 'b'", Read, "W S S"},
	{"xq", "SELECT 'a'\n'\\' , set_config('a', 'b', false) -- '", Session, ""},

	{"xqs", "SELECT E'x'\n'\\'' , '\\' , set_config('app.tenant', 'evil', false) -- '", Session, ""},
	{"xqs", "SELECT E'x' -- c\n'\\'' , '\\' , set_config('app.tenant', 'evil', false) -- '", Session, ""},
	{"xqs", "SELECT E'x'\t\r\n  -- c\n\f'\\'' , '\\' , set_config('app.tenant', 'evil', false) -- '", Session, ""},
	{"xqs", "SELECT e'x'\n'\\'' , '\\' , set_config('app.tenant', 'evil', false) -- '", Session, "W S O S O W ( S O S O W )"},
	{"xqs", "SELECT 'a' -\n'b'", Read, "W S O S"},
	{"xqs", "SELECT 'a' /* c */\n'b'", Read, "W S S"},
	{"xqs", "SELECT 'a'\n-- c", Read, "W S"},
	{"xqs", "SELECT 'a'\n'b", Unknown, ""},

	{"xe", "SELECT E'\\'; DELETE FROM t; --'", Read, "W S"},
	{"xe", "SELECT E'\\\\'; DELETE FROM t", Write, "W S ; W W W"},
	{"xe", "SELECT e'\\x27, set_config(''a'', ''b'', false)'", Read, "W S"},
	{"xe", "SELECT E'\\047, set_config(''a'', ''b'', false)'", Read, "W S"},
	{"xe", "SELECT E'\\u0027, set_config(''a'', ''b'', false)'", Read, "W S"},
	{"xe", "SELECT E'a''b' , set_config('a', 'b', false)", Session, ""},
	{"xe", "SELECT E'\\", Unknown, ""},

	{"xeu", "SELECT E'\\uD83D\\uDE00' , set_config('a', 'b', false)", Session, ""},
	{"xeu", "SELECT E'\\uD83D\\uDE00, set_config(''a'', ''b'', false)'", Read, "W S"},

	{"xb", "SELECT B'10''01'", Read, "W S S"},
	{"xb", "SELECT B'1\\' , set_config('a', 'b', false) -- '", Session, ""},
	{"xb", "SELECT B'1'\n'0'", Read, "W S"},

	{"xh", "SELECT X'1F' , set_config('a', 'b', false)", Session, ""},
	{"xh", "SELECT x'1F'\n'2E'", Read, "W S"},
	{"xh", "SELECT X'1F''2E'", Read, "W S S"},

	{"xn", "SELECT N'a\\' , set_config('a', 'b', false) -- '", Session, ""},
	{"xn", "SELECT N'nextval(1)'", Read, "W W S"},

	{"xus", "SELECT U&'\\0027' , set_config('a', 'b', false)", Session, "W S O W ( S O S O W )"},
	{"xus", "SELECT U&'it''s \\' , set_config('a', 'b', false) -- '", Session, ""},
	{"xus", "SELECT U&'a'\n'\\' , set_config('a', 'b', false) -- '", Session, ""},

	{"xufailed", "SELECT u&v FROM t", Read, "W W O W W W"},
	{"xufailed", "SELECT U& 'x'", Read, "W W O S"},

	{"xdolq", "SELECT $a$ $b$ ' $a$ , set_config('a', 'b', false)", Session, "W S O W ( S O S O W )"},
	{"xdolq", "SELECT $a$x$ab$; DELETE $a$", Read, "W S"},
	{"xdolq", "SELECT $a$ $A$ , set_config('a', 'b', false) $a$", Read, "W S"},

	{"dolqfailed", "SELECT 1 $abc", Read, "W N O W"},

	{"param", "SELECT $1, $23", Read, "W P O P"},

	{"scs-off", "SELECT 'x'\n'\\'' , set_config('app.tenant', 'evil', false) -- '", Session, ""},
	{"scs-off", "SELECT 'x'\n'\\'' , '\\' , set_config('app.tenant', 'evil', false) -- '", Read, ""}, // a syntax error either way
	{"scs-off", "SELECT '\\'; DELETE FROM t; --'", Write, ""},

	{"unterminated", "SELECT 'a", Unknown, ""},
	{"unterminated", "SELECT \"a", Unknown, ""},
	{"unterminated", "SELECT U&\"a", Unknown, ""},
	{"unterminated", "SELECT U&'a", Unknown, ""},
	{"unterminated", "SELECT B'1", Unknown, ""},
	{"unterminated", "SELECT $$a", Unknown, ""},
	{"unterminated", "SELECT 1 /* a", Unknown, ""},

	// Session state that is no lexical matter.
	{"INITIAL", "SELECT 1 INTO LOCAL TEMP t", Session, ""},
	{"INITIAL", "SELECT 1 INTO LOCAL TEMPORARY TABLE t", Session, ""},
	{"INITIAL", "SELECT 1 INTO GLOBAL TEMP t", Session, ""},
	{"INITIAL", "SELECT * INTO GLOBAL TEMPORARY TABLE t FROM s", Session, ""},
	{"INITIAL", "SELECT * INTO TEMPORARY t FROM s", Session, ""},
	{"INITIAL", "SELECT * INTO local_t FROM s", Write, ""},
	{"INITIAL", "SELECT set_limit(0.9)", Session, ""},
	{"INITIAL", "SELECT public.set_limit(0.9)", Session, ""},
	{"INITIAL", "SELECT isn_weak(true)", Session, ""},
	{"INITIAL", "SELECT * FROM crosstab('SELECT set_config(''a'', ''b'', false), 1, 2') AS t(a text, b int)", Session, ""},
	{"INITIAL", "SELECT * FROM ts_stat('SELECT set_config(''a'', ''b'', false)::tsvector')", Session, ""},
}

// tokenKinds writes the kinds of the tokens of sql, separated by spaces: W
// a word, Q a quoted identifier, U a U&"…" identifier, S a string
// constant, N a number, P a parameter, the parentheses and ; as
// themselves, O anything else.
func tokenKinds(sql string, backslashQuotes bool) string {
	l := lexer{s: sql, backslashQuotes: backslashQuotes}
	var out []string
	for {
		k, _, _ := l.next()
		if k == tEOF {
			return strings.Join(out, " ")
		}
		out = append(out, [...]string{tWord: "W", tQIdent: "Q", tUIdent: "U", tString: "S", tNumber: "N",
			tParam: "P", tLParen: "(", tRParen: ")", tSemi: ";", tOther: "O"}[k])
	}
}

func TestLexerStates(t *testing.T) {
	cases := map[string]int{}
	for _, tt := range lexerStateTests {
		cases[tt.state]++
		if got := Classify(tt.sql).Class; got != tt.want {
			t.Errorf("%s: Classify(%q) = %v, want %v", tt.state, tt.sql, got, tt.want)
		}
		if tt.toks != "" {
			if got := tokenKinds(tt.sql, false); got != tt.toks {
				t.Errorf("%s: tokens of %q = %q, want %q", tt.state, tt.sql, got, tt.toks)
			}
		}
	}
	for _, s := range scanStates {
		if cases[s] == 0 {
			t.Errorf("no case for lexer state %s", s)
		}
	}
	for s := range cases {
		if !strings.Contains(" "+strings.Join(scanStates, " ")+" ", " "+s+" ") {
			t.Errorf("cases for %s, which scanStates does not list", s)
		}
	}
}

// TestIdent holds the decoding of identifiers to what PostgreSQL stores.
func TestIdent(t *testing.T) {
	tests := []struct {
		sql  string // one identifier, as a whole input
		want string
	}{
		{`Set_Config`, "set_config"},
		{`"Set""Config"`, `Set"Config`},
		{`U&"\0073et_config"`, "set_config"},
		{`U&"\+000073et"`, "set"},
		{`U&"a\\b"`, `a\b`},
		{`U&"a""\0062"`, `a"b`},
		{`U&"!0061!!" UESCAPE '!'`, "a!"},
		{`U&"!0061" UESCAPE E'\041'`, "a"},
		{`U&"\00e9t\00E9"`, "été"},
		{`U&"\D83D\DE00"`, "\U0001F600"},
		{`U&"\D83Dx"`, `\D83Dx`}, // rejected by the server: kept as written
		{`U&"\0000a"`, `\0000a`},
		{`U&"\12"`, `\12`},
		{`U&"` + strings.Repeat(`\0061`, 70) + `"`, strings.Repeat("a", maxIdentLen)},
		{`U&"` + strings.Repeat("a", 62) + `\00e9"`, strings.Repeat("a", 62)},
	}
	for _, tt := range tests {
		l := lexer{s: tt.sql}
		k, a, b := l.next()
		var buf [maxIdentLen]byte
		if got := string(l.ident(buf[:0], k, a, b)); got != tt.want {
			t.Errorf("ident(%q) = %q, want %q", tt.sql, got, tt.want)
		}
		if k2, _, _ := l.next(); k2 != tEOF {
			t.Errorf("%q: the UESCAPE clause is not part of the identifier", tt.sql)
		}
	}
}

// TestUescape holds the escape character read from a UESCAPE clause.
func TestUescape(t *testing.T) {
	tests := []struct {
		clause string
		esc    byte
		ok     bool
	}{
		{` UESCAPE '!'`, '!', true},
		{` uescape/**/'#'`, '#', true},
		{` UESCAPE E'\x21'`, '!', true},
		{` UESCAPE E'\041'`, '!', true},
		{` UESCAPE E'\u0021'`, '!', true},
		{` UESCAPE E'\U00000021'`, '!', true},
		{` UESCAPE E'\n'`, '\n', true},
		{` UESCAPE E'\q'`, 'q', true},
		{` UESCAPE E''''`, '\'', true},
		{` UESCAPE $$!$$`, '!', true},
		{` UESCAPE '!'` + "\n''", '!', true},
		{` UESCAPE '!!'`, '\\', true}, // rejected by the server
		{` UESCAPE E'\u00e9'`, '\\', true},
		{` UESCAPE`, '\\', false},
		{` UESCAPE x`, '\\', false},
		{` UESCAPEx '!'`, '\\', false},
		{` UESCAPE '!`, '\\', false},
		{` UESCAPE /* '!'`, '\\', false},
		{` , '!'`, '\\', false},
	}
	for _, tt := range tests {
		l := lexer{s: tt.clause}
		esc, end, ok := l.uescape(0)
		if esc != tt.esc || ok != tt.ok {
			t.Errorf("uescape(%q) = %q, %v; want %q, %v", tt.clause, esc, ok, tt.esc, tt.ok)
		}
		if ok && end != len(tt.clause) {
			t.Errorf("uescape(%q) ends at %d, want %d", tt.clause, end, len(tt.clause))
		}
	}
}
