package sqlclass

import (
	"strings"
	"unicode/utf8"
)

// tokKind is the kind of a token the classifier looks at. Whitespace and
// comments are not tokens.
type tokKind uint8

const (
	tEOF    tokKind = iota
	tWord           // unquoted identifier or key word
	tQIdent         // "quoted identifier"; the span is its content
	tUIdent         // U&"quoted identifier" with Unicode escapes; the span is its content
	tString         // any string constant: '…', E'…', B'…', X'…', U&'…', $tag$…$tag$
	tNumber         // digits
	tParam          // $1
	tLParen         // (
	tRParen         // )
	tSemi           // ;
	tOther          // any other byte: operators, punctuation
)

// isName reports whether a token of kind k is an identifier: a word, or a
// quoted identifier with or without Unicode escapes.
func isName(k tokKind) bool {
	return k == tWord || k == tQIdent || k == tUIdent
}

// Character classes, from PostgreSQL's scan.l.
const (
	cSpace      = 1 << iota // [ \t\n\r\f\v]
	cIdentStart             // [A-Za-z\200-\377_]
	cIdentCont              // [A-Za-z\200-\377_0-9$]
	cDigit                  // [0-9]
	cDolqCont               // [A-Za-z\200-\377_0-9]: a dollar-quote tag has no '$'
	cHex                    // [0-9A-Fa-f]
)

var ctab = func() (t [256]uint8) {
	// \v is whitespace for PostgreSQL 16 and later; for 15 it is a byte
	// that no rule outside a literal or comment accepts, a syntax error.
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
		if digit || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' {
			t[c] |= cHex
		}
	}
	t['$'] |= cIdentCont
	return t
}()

// litMode is how the body of a single-quoted literal is read: the state of
// scan.l that its opening quote starts. A literal continued on another
// line (see continuation) is read in the mode of its first part.
type litMode uint8

const (
	// modeStd is <xq>, a standard '…' string with
	// standard_conforming_strings on: a doubled quote stands for a
	// quote, a backslash is a backslash.
	modeStd litMode = iota
	// modeEsc is <xe>: E'…', and '…' with standard_conforming_strings
	// off: a backslash escapes the next byte too.
	modeEsc
	// modeBits is <xb> and <xh>: B'…', X'…'. The first quote ends the
	// part; a doubled quote is the end of this literal and the start of
	// another.
	modeBits
	// modeUni is <xus>: U&'…', read as modeStd; its escapes are decoded
	// after the literal, with the character of its UESCAPE clause.
	modeUni
)

// lexer splits SQL text into the tokens that matter for classification,
// following PostgreSQL's lexer (src/backend/parser/scan.l) for everything
// that decides where a token, a literal or a comment ends, and its filter
// (src/backend/parser/parser.c) for the UESCAPE clause of a U& token.
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
			j := lineEnd(s, i)
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
		if j == i+1 && j < n {
			// A one-letter prefix glued to a quote starts a special
			// string constant; a longer identifier does not (abe'x' is
			// the identifier abe and the string 'x').
			switch c | 0x20 {
			case 'e':
				if s[j] == '\'' { // {xestart}: backslash escapes
					return l.literal(i, j+1, modeEsc)
				}
			case 'b', 'x':
				if s[j] == '\'' { // {xbstart}, {xhstart}
					return l.literal(i, j+1, modeBits)
				}
			case 'u':
				if s[j] == '&' && j+1 < n {
					switch s[j+1] {
					case '\'': // {xusstart}
						return l.literal(i, j+2, modeUni)
					case '"': // {xuistart}
						return l.uident(j + 2)
					}
				}
				// {xufailed}: U& without a quote is the identifier u
				// and the operator &.
			}
			// {xnstart}: N'…' is the key word NCHAR and a string of
			// its own, as here.
		}
		l.i = j
		return tWord, i, j
	case c == '\'':
		// {xqstart}
		if l.backslashQuotes {
			return l.literal(i, i+1, modeEsc)
		}
		return l.literal(i, i+1, modeStd)
	case c == '"':
		// {xdstart}
		j, ok := quotedIdent(s, i+1)
		if !ok {
			l.unterminated = true
			l.i = n
			return tQIdent, i + 1, n
		}
		l.i = j + 1
		return tQIdent, i + 1, j
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

// literal returns the single-quoted string constant that starts at start
// and whose first part's body starts at j, read in mode; a U& string's
// UESCAPE clause is part of the token.
func (l *lexer) literal(start, j int, mode litMode) (tokKind, int, int) {
	end, ok := l.scanLiteral(j, mode, nil)
	if !ok {
		l.unterminated = true
		l.i = len(l.s)
		return tString, start, len(l.s)
	}
	l.i = end
	if mode == modeUni {
		if _, e, ok := l.uescape(end); ok {
			l.i = e
		}
	}
	return tString, start, end
}

// uident returns the U&"…" identifier whose content starts at j, and
// consumes its UESCAPE clause. The span is the content, as for "…"; its
// escapes are decoded by ident.
func (l *lexer) uident(j int) (tokKind, int, int) {
	q, ok := quotedIdent(l.s, j)
	if !ok {
		l.unterminated = true
		l.i = len(l.s)
		return tUIdent, j, len(l.s)
	}
	l.i = q + 1
	if _, e, ok := l.uescape(q + 1); ok {
		l.i = e
	}
	return tUIdent, j, q
}

// quotedIdent returns the index of the quote that closes the quoted
// identifier whose content starts at j ({xdinside}, {xddouble} stands for
// a quote), and false when the input ends first.
func quotedIdent(s string, j int) (int, bool) {
	// A loop, not strings.IndexByte: quoted identifiers are short.
	for n := len(s); j < n; j++ {
		if s[j] == '"' {
			if j+1 < n && s[j+1] == '"' {
				j++
				continue
			}
			return j, true
		}
	}
	return len(s), false
}

// scanLiteral scans the body of a single-quoted literal that starts at j
// (just after its opening quote), in mode, and its continuations: scan.l's
// states <xq>, <xe>, <xb>, <xh> and <xus> until a quote, then <xqs>, which
// returns to the state the literal was in when a {quotecontinue} follows
// (whitespace with a newline, then a quote), so that every part of a
// literal is read in the mode of its first part. It returns the index just
// past the last closing quote, and false when the input ends inside the
// literal. When out is not nil, the literal's value (its escapes decoded)
// is added to it.
func (l *lexer) scanLiteral(j int, mode litMode, out *litBuf) (int, bool) {
	s := l.s
	n := len(s)
	for {
		for {
			if j >= n {
				return n, false
			}
			c := s[j]
			if c == '\'' {
				if mode != modeBits && j+1 < n && s[j+1] == '\'' {
					// {xqdouble}
					out.add('\'')
					j += 2
					continue
				}
				break
			}
			if c == '\\' {
				switch mode {
				case modeStd:
					l.backslashSeen = true
				case modeEsc:
					// {xeescape}, {xeoctesc}, {xehexesc}, {xeunicode}:
					// whatever they match, the byte after the backslash
					// is not the end of the literal.
					if j+1 >= n {
						return n, false
					}
					if out != nil {
						j = out.escape(s, j)
					} else {
						j += 2
					}
					continue
				}
			}
			out.add(c)
			j++
		}
		// s[j] is a closing quote: <xqs>.
		k := continuation(s, j+1)
		if k < 0 {
			return j + 1, true
		}
		j = k
	}
}

// continuation matches scan.l's {quotecontinue} at i, just after the
// closing quote of a literal's part: {whitespace_with_newline}{quote}, that
// is horizontal whitespace and -- comments, a newline, then whitespace and
// -- comments that end with a newline, then a quote. It returns the index
// just past that quote, or -1 when there is no continuation (a /* */
// comment does not continue a literal).
func continuation(s string, i int) int {
	n := len(s)
horiz:
	for i < n {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < n && s[i+1] == '-':
			i = lineEnd(s, i)
		default:
			break horiz
		}
	}
	if i >= n || s[i] != '\n' && s[i] != '\r' {
		return -1
	}
	i++
special:
	for i < n {
		switch c := s[i]; {
		case ctab[c]&cSpace != 0:
			i++
		case c == '-' && i+1 < n && s[i+1] == '-':
			// {comment}{newline}
			if i = lineEnd(s, i); i >= n {
				return -1
			}
			i++
		default:
			break special
		}
	}
	if i < n && s[i] == '\'' {
		return i + 1
	}
	return -1
}

// lineEnd returns the index of the newline (\n or \r) that ends the line
// comment starting at i, or len(s).
func lineEnd(s string, i int) int {
	j := i + 2
	for j < len(s) && s[j] != '\n' && s[j] != '\r' {
		j++
	}
	return j
}

// dollar scans what starts with '$' at i: a parameter ($1), a dollar-quoted
// string ($$…$$, $tag$…$tag$), or a lone '$'.
func (l *lexer) dollar(i int) (tokKind, int, int) {
	s := l.s
	n := len(s)
	if j := i + 1; j < n && ctab[s[j]]&cDigit != 0 {
		for j < n && ctab[s[j]]&cDigit != 0 {
			j++
		}
		l.i = j
		return tParam, i, j
	}
	d := dollarDelim(s, i)
	if d == 0 {
		// $abc without a closing '$' is a lone '$' followed by the
		// identifier abc, as PostgreSQL's {dolqfailed} rule has it.
		l.i = i + 1
		return tOther, i, i + 1
	}
	k := strings.Index(s[i+d:], s[i:i+d])
	if k < 0 {
		l.unterminated = true
		l.i = n
		return tString, i, n
	}
	end := i + d + k + d
	l.i = end
	return tString, i, end
}

// dollarDelim returns the length of the dollar-quote delimiter ($$ or
// $tag$, {dolqdelim}) at i, or 0 when there is none. Inside a dollar quote
// every '$' starts a fresh attempt to match the closing delimiter, so the
// first occurrence of the delimiter closes it. Tags are case-sensitive.
func dollarDelim(s string, i int) int {
	n := len(s)
	j := i + 1
	if j < n && ctab[s[j]]&cIdentStart != 0 {
		for j < n && ctab[s[j]]&cDolqCont != 0 {
			j++
		}
	}
	if j >= n || s[j] != '$' {
		return 0
	}
	return j + 1 - i
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

// skipSpace returns the index of the first byte at or after i that is not
// whitespace or in a comment, and false when a block comment there is
// unterminated.
func skipSpace(s string, i int) (int, bool) {
	n := len(s)
	for i < n {
		switch {
		case ctab[s[i]]&cSpace != 0:
			i++
		case s[i] == '-' && i+1 < n && s[i+1] == '-':
			i = lineEnd(s, i)
		case s[i] == '/' && i+1 < n && s[i+1] == '*':
			j, ok := skipBlockComment(s, i)
			if !ok {
				return n, false
			}
			i = j
		default:
			return i, true
		}
	}
	return n, true
}

// uescape reads the UESCAPE 'c' clause that may follow a U& token, from i
// just past it. PostgreSQL's filter between lexer and grammar
// (base_yylex in parser.c) takes the key word UESCAPE after the token,
// across whitespace and comments, and then a string constant ('…', E'…',
// a dollar quote, each possibly continued) whose value is the escape
// character. It returns that character, the index just past the clause,
// and false when there is no complete clause. An escape string that is
// not one byte is returned as the default '\\': the server rejects it.
func (l *lexer) uescape(i int) (esc byte, end int, ok bool) {
	s := l.s
	n := len(s)
	p, ok := skipSpace(s, i)
	if !ok || !hasPrefixFold(s[p:], "uescape") || p+7 < n && ctab[s[p+7]]&cIdentCont != 0 {
		return '\\', i, false
	}
	if p, ok = skipSpace(s, p+7); !ok || p >= n {
		return '\\', i, false
	}
	var v litBuf
	switch {
	case s[p] == '\'':
		mode := modeStd
		if l.backslashQuotes {
			mode = modeEsc
		}
		end, ok = l.scanLiteral(p+1, mode, &v)
	case s[p]|0x20 == 'e' && p+1 < n && s[p+1] == '\'':
		end, ok = l.scanLiteral(p+2, modeEsc, &v)
	case s[p] == '$':
		d := dollarDelim(s, p)
		if d == 0 {
			return '\\', i, false
		}
		k := strings.Index(s[p+d:], s[p:p+d])
		if k < 0 {
			return '\\', i, false
		}
		for _, c := range []byte(s[p+d : p+d+k]) {
			v.add(c)
		}
		end, ok = p+d+k+d, true
	default:
		return '\\', i, false
	}
	if !ok {
		return '\\', i, false
	}
	if v.n != 1 {
		return '\\', end, true
	}
	return v.b, end, true
}

// litBuf is the part of a literal's value that a UESCAPE clause needs: its
// first byte and its length in bytes.
type litBuf struct {
	b byte
	n int
}

// add adds c to the value; on a nil litBuf it does nothing.
func (v *litBuf) add(c byte) {
	if v == nil {
		return
	}
	if v.n == 0 {
		v.b = c
	}
	v.n++
}

// escape decodes the backslash escape at s[j] of an E'…' literal (s[j+1]
// exists), as scan.l's <xe> rules and unescape_single_char do, adds its
// value and returns the index just past it.
func (v *litBuf) escape(s string, j int) int {
	n := len(s)
	switch c := s[j+1]; {
	case c >= '0' && c <= '7': // {xeoctesc}
		k, x := j+1, 0
		for k < n && k < j+4 && s[k] >= '0' && s[k] <= '7' {
			x = x*8 + int(s[k]-'0')
			k++
		}
		v.add(byte(x))
		return k
	case c == 'x' && j+2 < n && ctab[s[j+2]]&cHex != 0: // {xehexesc}
		k, x := j+2, 0
		for k < n && k < j+4 && ctab[s[k]]&cHex != 0 {
			x = x*16 + hexVal(s[k])
			k++
		}
		v.add(byte(x))
		return k
	case c == 'u' || c == 'U': // {xeunicode}
		digits := 4
		if c == 'U' {
			digits = 8
		}
		x, ok := hexN(s, j+2, digits)
		if !ok {
			// {xeunicodefail}: the server rejects the input.
			v.n += 2
			return j + 2
		}
		if x > 0 && x < 0x80 {
			v.add(byte(x))
		} else {
			// Not one byte: too long for an escape character.
			v.n += 2
		}
		return j + 2 + digits
	case c == 'b':
		v.add('\b')
	case c == 'f':
		v.add('\f')
	case c == 'n':
		v.add('\n')
	case c == 'r':
		v.add('\r')
	case c == 't':
		v.add('\t')
	default:
		// {xeescape}: the byte itself (\v is v up to PostgreSQL 15).
		v.add(c)
	}
	return j + 2
}

// hexN reads exactly digits hexadecimal digits at s[i:].
func hexN(s string, i, digits int) (int, bool) {
	if i+digits > len(s) {
		return 0, false
	}
	x := 0
	for k := i; k < i+digits; k++ {
		if ctab[s[k]]&cHex == 0 {
			return 0, false
		}
		x = x*16 + hexVal(s[k])
	}
	return x, true
}

// hexVal is the value of the hexadecimal digit c.
func hexVal(c byte) int {
	switch {
	case c >= 'a':
		return int(c-'a') + 10
	case c >= 'A':
		return int(c-'A') + 10
	}
	return int(c - '0')
}

// ident appends to buf the identifier of the token of kind k at [a, b)
// as PostgreSQL stores it: a word folded to lower case (ASCII), a quoted
// identifier with its doubled quotes undone, a U&"…" identifier with its
// Unicode escapes decoded (by the character of its UESCAPE clause, '\'
// without one); cut to maxIdentLen bytes. buf must have that capacity, so
// that nothing is allocated.
func (l *lexer) ident(buf []byte, k tokKind, a, b int) []byte {
	w := l.s[a:b]
	if k == tUIdent {
		esc := byte('\\')
		if b < len(l.s) {
			esc, _, _ = l.uescape(b + 1)
		}
		return unescapeIdent(buf, w, esc)
	}
	return fold(buf, w, k == tQIdent)
}

// fold appends an identifier as PostgreSQL stores it to buf: an unquoted
// one folded to lower case (ASCII), a quoted one with its doubled quotes
// undone; both cut to maxIdentLen bytes. buf must have that capacity, so
// that nothing is allocated.
func fold(buf []byte, w string, quoted bool) []byte {
	for i := 0; i < len(w) && len(buf) < maxIdentLen; i++ {
		c := w[i]
		switch {
		case quoted && c == '"':
			i++ // "" stands for "
		case !quoted && c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		}
		buf = append(buf, c)
	}
	return clipIdent(buf)
}

// clipIdent drops from an identifier cut at maxIdentLen bytes the start of
// a UTF-8 character that the cut split, as PostgreSQL's pg_mbcliplen does.
func clipIdent(buf []byte) []byte {
	if len(buf) < maxIdentLen {
		return buf
	}
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-utf8.UTFMax; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				return buf[:i]
			}
			break
		}
	}
	return buf
}

// unescapeIdent appends to buf the content w of a U&"…" identifier with
// its doubled quotes undone and its escapes decoded, as str_udeescape in
// parser.c decodes them: esc esc is esc, esc and 4 hexadecimal digits or
// esc + and 6 are a code point (two for a UTF-16 surrogate pair), written
// in UTF-8. What the server rejects (an invalid escape or code point) is
// kept as written. It stops at maxIdentLen bytes, before a character that
// does not fit whole.
func unescapeIdent(buf []byte, w string, esc byte) []byte {
	for i := 0; i < len(w); {
		c := w[i]
		var u [4]byte
		p, k := u[:1], 1
		u[0] = c
		switch {
		case c == '"':
			k = 2 // "" stands for "
		case c == esc && i+1 < len(w) && w[i+1] == esc:
			k = 2
		case c == esc:
			cp, m := unicodeEscape(w, i+1)
			if m > 0 && cp >= 0xD800 && cp <= 0xDBFF {
				// A surrogate pair: the second half follows.
				j := i + 1 + m
				if j < len(w) && w[j] == esc {
					if lo, m2 := unicodeEscape(w, j+1); m2 > 0 && lo >= 0xDC00 && lo <= 0xDFFF {
						cp = 0x10000 + (cp-0xD800)<<10 + (lo - 0xDC00)
						m += 1 + m2
					}
				}
			}
			if m > 0 && cp > 0 && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF) {
				p, k = u[:encodeRune(u[:], cp)], 1+m
			}
			// Otherwise the server rejects the input: the escape
			// character is kept as written.
		}
		if len(buf)+len(p) > maxIdentLen {
			return clipIdent(buf)
		}
		buf = append(buf, p...)
		i += k
	}
	return clipIdent(buf)
}

// unicodeEscape reads the code point of an escape in w after its escape
// character, at i: 4 hexadecimal digits, or + and 6. It returns the
// number of bytes read, 0 when there is no such escape.
func unicodeEscape(w string, i int) (int, int) {
	if i < len(w) && w[i] == '+' {
		if cp, ok := hexN(w, i+1, 6); ok {
			return cp, 7
		}
		return 0, 0
	}
	if cp, ok := hexN(w, i, 4); ok {
		return cp, 4
	}
	return 0, 0
}

// encodeRune writes cp (a valid code point) in UTF-8 to p and returns the
// number of bytes written.
func encodeRune(p []byte, cp int) int {
	switch {
	case cp < 0x80:
		p[0] = byte(cp)
		return 1
	case cp < 0x800:
		p[0] = 0xC0 | byte(cp>>6)
		p[1] = 0x80 | byte(cp)&0x3F
		return 2
	case cp < 0x10000:
		p[0] = 0xE0 | byte(cp>>12)
		p[1] = 0x80 | byte(cp>>6)&0x3F
		p[2] = 0x80 | byte(cp)&0x3F
		return 3
	}
	p[0] = 0xF0 | byte(cp>>18)
	p[1] = 0x80 | byte(cp>>12)&0x3F
	p[2] = 0x80 | byte(cp>>6)&0x3F
	p[3] = 0x80 | byte(cp)&0x3F
	return 4
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
