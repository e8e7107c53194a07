package sqlclass

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzClassify checks that Classify never panics and that its conservative
// promises hold for any input s:
//
//   - a write appended as a statement of its own is never lost: s followed
//     by "\n; DELETE FROM t" is at least a Write, whatever s leaves open
//     (an unterminated string, quoted identifier, dollar quote or block
//     comment swallows the DELETE, but then the input is Unknown). The
//     newline ends a line comment at the end of s, which would otherwise,
//     rightly, swallow the DELETE;
//   - likewise an advisory lock appended is Session, or the input is at
//     least Unknown;
//   - a read before s does not change the class of s;
//   - a routing comment before s does not change its class;
//   - a catalog only makes a statement more dangerous: ClassifyWith is at
//     least Classify, and its FuncName lies within s.
func FuzzClassify(f *testing.F) {
	for _, tt := range classifyTests {
		f.Add(tt.sql)
	}
	for _, tt := range functionTests {
		f.Add(tt.sql)
	}
	for _, tt := range lexerStateTests {
		f.Add(tt.sql)
	}
	fn := testFunctions(f, []string{"jitter"}, []string{"app.audit"})
	f.Fuzz(func(t *testing.T, s string) {
		r := Classify(s)
		if r.Class >= numClasses || r.Hint > HintReplica || r.Statements < 0 {
			t.Fatalf("Classify(%q) = %+v: out of range", s, r)
		}
		if r.Statements == 0 && r.Class != Read {
			t.Fatalf("Classify(%q) = %+v: no statement but not a read", s, r)
		}
		if r.Statements > 0 && !r.Has(r.Class) {
			t.Fatalf("Classify(%q) = %+v: Has(Class) is false", s, r)
		}

		if w := Classify(s + "\n; DELETE FROM t"); rank[w.Class] < rank[Write] {
			t.Fatalf("Classify(%q + DELETE) = %v, want at least write", s, w.Class)
		}
		if l := Classify(s + "\n; SELECT pg_advisory_lock(1)"); l.Class != Session && rank[l.Class] < rank[Unknown] {
			t.Fatalf("Classify(%q + advisory lock) = %v, want session, or at least unknown", s, l.Class)
		}
		if p := Classify("SELECT 1;\n" + s); p.Class != r.Class {
			t.Fatalf("Classify(SELECT 1; + %q) = %v, Classify(%q) = %v", s, p.Class, s, r.Class)
		}
		if h := Classify("/* pgrouted:replica */ " + s); h.Class != r.Class {
			t.Fatalf("Classify(hint + %q) = %v, Classify(%q) = %v", s, h.Class, s, r.Class)
		}
		w := ClassifyWith(s, fn)
		if rank[w.Class] < rank[r.Class] || w.Statements != r.Statements || w.Hint != r.Hint {
			t.Fatalf("ClassifyWith(%q) = %+v, Classify = %+v", s, w, r)
		}
		if w.Func != FuncNone && (w.FuncStart < 0 || w.FuncEnd > len(s) || w.FuncStart > w.FuncEnd) {
			t.Fatalf("ClassifyWith(%q): function span [%d, %d) outside the input", s, w.FuncStart, w.FuncEnd)
		}
		if w.Func != FuncNone && rank[w.Class] < rank[w.Func.class()] {
			t.Fatalf("ClassifyWith(%q) = %v with %v", s, w.Class, w.Func)
		}
	})
}

// literalModes are the ways FuzzLiteral writes a string constant: each
// quotes body so that the server reads it as one constant.
var literalModes = []func(body string) string{
	func(b string) string { return "'" + strings.ReplaceAll(b, "'", "''") + "'" },                      // xq
	func(b string) string { return "E'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(b) + "'" }, // xe
	func(b string) string {
		return "e'" + strings.ReplaceAll(strings.ReplaceAll(b, `\`, `\\`), "'", "''") + "'"
	}, // xe
	func(b string) string { return "B'" + strings.ReplaceAll(b, "'", "") + "'" },                // xb
	func(b string) string { return "X'" + strings.ReplaceAll(b, "'", "") + "'" },                // xh
	func(b string) string { return "U&'" + strings.ReplaceAll(b, "'", "''") + "'" },             // xus
	func(b string) string { return "U&'" + strings.ReplaceAll(b, "'", "''") + "' UESCAPE '!'" }, // xus, uescape
	func(b string) string { return "$q$" + strings.ReplaceAll(b, "$", "") + "$q$" },             // xdolq
	func(b string) string { return "$$" + strings.ReplaceAll(b, "$", "") + "$$" },               // xdolq
	func(b string) string { return "N'" + strings.ReplaceAll(b, "'", "''") + "'" },              // xn
}

// continuations are what may separate the parts of a continued literal
// ({quotecontinue}), and notContinuations what ends one.
var (
	continuations    = []string{"\n", "\r", " \t\n", " -- c'\n", "\n-- x'\n\n", "\f\r\n\v", "--\n\n-- '\r"}
	notContinuations = []string{" ", " /* ' */\n", "\n/* ' */", " - \n", "\n-\n"}
)

// FuzzLiteral checks the extent of string constants of every kind, with
// any content and continued on other lines: a constant written as the
// server reads it is one token, and a call of set_config after it is
// seen, whatever the constant holds (so nothing in a literal can hide a
// call, nor a literal be read as ending early and show one that is not
// there: the tokens are exactly those written).
func FuzzLiteral(f *testing.F) {
	for _, s := range []string{"", "x", `\`, `'`, `\'`, "''", `\\'`, "\n'", "--", "/*", "$q$", "$$", `\x27`, `\u0027`, "\\\n'"} {
		for mode := range literalModes {
			f.Add(s, s, uint8(mode), uint8(mode)|0x80)
		}
	}
	f.Add("x", `\'' , '\' , set_config('app.tenant', 'evil', false) -- `, uint8(1), uint8(0x80))
	f.Fuzz(func(t *testing.T, body, more string, mode, sep uint8) {
		write := literalModes[int(mode)%len(literalModes)]
		lit := write(body)
		continued := sep&0x80 != 0 && !strings.HasPrefix(lit, "$") && !strings.Contains(lit, "UESCAPE")
		if continued {
			// The continuation is read in the first part's mode: for E'…'
			// a backslash escapes; for B'…' a quote ends the part.
			part := write(more)
			part = part[strings.IndexByte(part, '\''):]
			lit += continuations[int(sep&0x7f)%len(continuations)] + part
		}
		sql := "SELECT " + lit + " , set_config('a', 'b', false)"
		want := "W S O W ( S O S O W )"
		if strings.HasPrefix(lit, "N") {
			want = "W W S O W ( S O S O W )"
		}
		if got := tokenKinds(sql, false); got != want {
			t.Fatalf("tokens of %q = %q, want %q", sql, got, want)
		}
		if got := Classify(sql).Class; got != Session {
			t.Fatalf("Classify(%q) = %v, want session", sql, got)
		}
		// Parts that are not continued are two constants.
		if continued {
			two := "SELECT " + write(body) + notContinuations[int(sep&0x7f)%len(notContinuations)] + "'x'"
			if got := tokenKinds(two, false); !strings.HasSuffix(got, "S S") && !strings.HasSuffix(got, "S O S") {
				t.Fatalf("tokens of %q = %q, want two constants", two, got)
			}
		}
	})
}

// FuzzUIdent checks the decoding of U&"…" identifiers: any name written
// with any of its characters escaped, with the default escape character
// or one set by UESCAPE, decodes to the name, and an EXPLAIN option so
// written is ANALYZE when the name is.
func FuzzUIdent(f *testing.F) {
	for _, s := range []string{"analyze", "ANALYSE", "set_config", "pg_temp", `a"b`, `a\b`, "a!b", "été", "\U0001F600"} {
		f.Add(s, uint64(0x5555), uint8(0))
		f.Add(s, ^uint64(0), uint8(3))
	}
	escapes := []struct {
		c      rune
		clause string
	}{
		{'\\', ""}, {'!', " UESCAPE '!'"}, {'!', " UESCAPE E'\\041'"}, {'#', " /* c */ uescape\n$$#$$"},
	}
	f.Fuzz(func(t *testing.T, name string, pattern uint64, e uint8) {
		if !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
			return
		}
		esc := escapes[int(e)%len(escapes)]
		var b strings.Builder
		b.WriteString(`U&"`)
		for i, r := range name {
			switch {
			case pattern>>(uint(i)%64)&1 == 1 && r > 0xFFFF:
				fmt.Fprintf(&b, "%c+%06X", esc.c, r)
			case pattern>>(uint(i)%64)&1 == 1:
				fmt.Fprintf(&b, "%c%04x", esc.c, r)
			case r == esc.c:
				b.WriteString(string(esc.c) + string(esc.c))
			case r == '"':
				b.WriteString(`""`)
			default:
				b.WriteRune(r)
			}
		}
		b.WriteString(`"` + esc.clause)
		ident := b.String()
		l := lexer{s: ident}
		k, a, end := l.next()
		if k != tUIdent {
			t.Fatalf("%q is lexed as %v", ident, k)
		}
		var buf [maxIdentLen]byte
		got := string(l.ident(buf[:0], k, a, end))
		want := name
		for len(want) > maxIdentLen || !utf8.ValidString(want) {
			want = want[:len(want)-1]
		}
		if got != want {
			t.Fatalf("ident(%q) = %q, want %q", ident, got, want)
		}
		if k, _, _ := l.next(); k != tEOF {
			t.Fatalf("%q: the UESCAPE clause is not part of the identifier", ident)
		}
		// An option, ANALYZE or not, and the explained statement is
		// judged as if on its own: the identifier must not swallow it.
		sql := "EXPLAIN (" + ident + ") DELETE FROM t"
		if got := Classify(sql).Class; got != Write {
			t.Fatalf("Classify(%q) = %v, want %v", sql, got, Write)
		}
	})
}
