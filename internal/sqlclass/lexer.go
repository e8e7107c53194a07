package sqlclass

import "strings"

// tokKind is the kind of a token the classifier looks at. Whitespace and
// comments are not tokens.
type tokKind uint8

const (
	tEOF    tokKind = iota
	tWord           // unquoted identifier or key word
	tQIdent         // "quoted identifier"; the span is its content
	tString         // any string constant: '…', E'…', B'…', X'…', U&'…', $tag$…$tag$
	tNumber         // digits
	tParam          // $1
	tLParen         // (
	tRParen         // )
	tSemi           // ;
	tOther          // any other byte: operators, punctuation
)

// Character classes, from PostgreSQL's scan.l.
const (
	cSpace      = 1 << iota // [ \t\n\r\f\v]
	cIdentStart             // [A-Za-z\200-\377_]
	cIdentCont              // [A-Za-z\200-\377_0-9$]
	cDigit                  // [0-9]
	cDolqCont               // [A-Za-z\200-\377_0-9]: a dollar-quote tag has no '$'
)

var ctab = func() (t [256]uint8) {
	for _, c := range []byte(" \t\n\r\f\v") {
		t[c] |= cSpace
	}
	for c := 0; c < 256; c++ {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
		digit := c >= '0' && c <= '9'
		if letter {
			t[c] |= cIdentStart | cIdentCont | cDolqCont
		}
		if digit {
			t[c] |= cDigit | cIdentCont | cDolqCont
		}
	}
	t['$'] |= cIdentCont
	return t
}()

// lexer splits SQL text into the tokens that matter for classification,
// following PostgreSQL's lexer (src/backend/parser/scan.l) for everything
// that decides where a token, a literal or a comment ends.
type lexer struct {
	s string
	i int

	// backslashQuotes makes a backslash escape the next character in
	// standard '…' strings, as it does when the server runs with
	// standard_conforming_strings = off.
	backslashQuotes bool

	// unterminated is set when the input ends inside a string, a quoted
	// identifier, a dollar quote or a block comment.
	unterminated bool

	// backslashSeen is set when a standard '…' string contains a
	// backslash, so that its extent depends on standard_conforming_strings.
	backslashSeen bool

	// started is set once the first token has been returned; comments
	// before it are looked at for a routing hint.
	started bool
	hint    Hint
}

// next returns the next token and its span in l.s. For a quoted identifier
// the span is the content between the quotes.
func (l *lexer) next() (k tokKind, start, end int) {
	s := l.s
	n := len(s)
	i := l.i
	for i < n {
		c := s[i]
		if ctab[c]&cSpace != 0 {
			i++
			continue
		}
		if c == '-' && i+1 < n && s[i+1] == '-' {
			// A line comment ends at \n or \r, or at the end of the input,
			// which is a proper end for it.
			j := i + 2
			for j < n && s[j] != '\n' && s[j] != '\r' {
				j++
			}
			if !l.started {
				l.noteHint(s[i+2 : j])
			}
			i = j
			continue
		}
		if c == '/' && i+1 < n && s[i+1] == '*' {
			j, ok := skipBlockComment(s, i)
			if !ok {
				l.unterminated = true
				l.i = n
				return tEOF, n, n
			}
			if !l.started {
				l.noteHint(s[i+2 : j-2])
			}
			i = j
			continue
		}
		break
	}
	if i >= n {
		l.i = n
		return tEOF, n, n
	}
	l.started = true
	c := s[i]
	cc := ctab[c]
	switch {
	case cc&cIdentStart != 0:
		j := i + 1
		for j < n && ctab[s[j]]&cIdentCont != 0 {
			j++
		}
		if j == i+1 && j < n && s[j] == '\'' {
			// A one-letter prefix glued to a quote starts a special
			// string constant; a longer identifier does not (abe'x' is
			// the identifier abe and the string 'x').
			switch c | 0x20 {
			case 'e': // E'…': backslash escapes
				return l.quoted(i, j+1, true)
			case 'b', 'x': // B'…', X'…': no escapes at all
				return l.quoted(i, j+1, false)
			}
			// N'…' is the key word NCHAR and a standard string, as here.
		}
		l.i = j
		return tWord, i, j
	case c == '\'':
		return l.quoted(i, i+1, l.backslashQuotes)
	case c == '"':
		// A loop, not strings.IndexByte: quoted identifiers are short.
		j := i + 1
		for j < n {
			if s[j] == '"' {
				if j+1 < n && s[j+1] == '"' {
					j += 2
					continue
				}
				l.i = j + 1
				return tQIdent, i + 1, j
			}
			j++
		}
		l.unterminated = true
		l.i = n
		return tQIdent, i + 1, n
	case cc&cDigit != 0:
		// Digits only: whatever follows (., e, an identifier, $) is lexed
		// on its own, which shows the classifier at least as many words
		// as the server sees.
		j := i + 1
		for j < n && ctab[s[j]]&cDigit != 0 {
			j++
		}
		l.i = j
		return tNumber, i, j
	case c == '$':
		return l.dollar(i)
	case c == '(':
		l.i = i + 1
		return tLParen, i, i + 1
	case c == ')':
		l.i = i + 1
		return tRParen, i, i + 1
	case c == ';':
		l.i = i + 1
		return tSemi, i, i + 1
	}
	l.i = i + 1
	return tOther, i, i + 1
}

// quoted scans a single-quoted string constant whose body starts at j
// (just after the opening quote); start is where the token starts. A
// doubled quote stands for a quote; when esc is set a backslash escapes
// the next byte too.
func (l *lexer) quoted(start, j int, esc bool) (tokKind, int, int) {
	s := l.s
	n := len(s)
	plain := j == start+1 // a standard '…' string, no prefix
	for j < n {
		switch s[j] {
		case '\'':
			if j+1 < n && s[j+1] == '\'' {
				j += 2
				continue
			}
			l.i = j + 1
			return tString, start, j + 1
		case '\\':
			if plain {
				l.backslashSeen = true
			}
			if esc {
				j += 2
				continue
			}
		}
		j++
	}
	l.unterminated = true
	l.i = n
	return tString, start, n
}

// dollar scans what starts with '$' at i: a parameter ($1), a dollar-quoted
// string ($$…$$, $tag$…$tag$), or a lone '$'.
func (l *lexer) dollar(i int) (tokKind, int, int) {
	s := l.s
	n := len(s)
	j := i + 1
	if j < n && ctab[s[j]]&cDigit != 0 {
		for j < n && ctab[s[j]]&cDigit != 0 {
			j++
		}
		l.i = j
		return tParam, i, j
	}
	if j < n && ctab[s[j]]&cIdentStart != 0 {
		for j < n && ctab[s[j]]&cDolqCont != 0 {
			j++
		}
	}
	if j >= n || s[j] != '$' {
		// $abc without a closing '$' is a lone '$' followed by the
		// identifier abc, as PostgreSQL's {dolqfailed} rule has it.
		l.i = i + 1
		return tOther, i, i + 1
	}
	delim := s[i : j+1]
	body := j + 1
	// Every '$' inside a dollar quote starts a fresh attempt to match the
	// closing delimiter, so the first occurrence of the delimiter closes
	// it. Tags are case-sensitive.
	k := strings.Index(s[body:], delim)
	if k < 0 {
		l.unterminated = true
		l.i = n
		return tString, i, n
	}
	end := body + k + len(delim)
	l.i = end
	return tString, i, end
}

// skipBlockComment skips the block comment that starts at i with "/*",
// counting nested comments as PostgreSQL does. It returns the index just
// past the closing "*/" and whether there was one.
func skipBlockComment(s string, i int) (int, bool) {
	n := len(s)
	depth := 1
	j := i + 2
	for j+1 < n {
		switch {
		case s[j] == '*' && s[j+1] == '/':
			depth--
			j += 2
			if depth == 0 {
				return j, true
			}
		case s[j] == '/' && s[j+1] == '*':
			depth++
			j += 2
		default:
			j++
		}
	}
	return n, false
}

// noteHint looks for a routing hint in the content of a comment that comes
// before the first token. Primary wins over replica when both are given.
func (l *lexer) noteHint(content string) {
	content = trimSpace(content)
	switch {
	case equalFold(content, "pgrouted:primary"):
		l.hint = HintPrimary
	case equalFold(content, "pgrouted:replica"):
		if l.hint == NoHint {
			l.hint = HintReplica
		}
	}
}

func trimSpace(s string) string {
	for len(s) > 0 && ctab[s[0]]&cSpace != 0 {
		s = s[1:]
	}
	for len(s) > 0 && ctab[s[len(s)-1]]&cSpace != 0 {
		s = s[:len(s)-1]
	}
	return s
}

// equalFold reports whether s equals lower, a lower-case ASCII string,
// ignoring ASCII case.
func equalFold(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// hasPrefixFold reports whether s starts with lower, a lower-case ASCII
// string, ignoring ASCII case.
func hasPrefixFold(s, lower string) bool {
	return len(s) >= len(lower) && equalFold(s[:len(lower)], lower)
}
