package otelroute

import "strings"

// This file makes db.operation.name and db.query.summary from a
// statement's text, as OpenTelemetry's database conventions ask of an
// instrumentation that can parse queries ("Generating a summary of the
// query"): the operations (SELECT, INSERT, UPDATE, DELETE, MERGE, and the
// command a statement of another kind starts with) and their targets (the
// relations after FROM, JOIN, INTO, UPDATE, MERGE INTO, USING), in the
// order the text gives them, as it spells them (no case folding), at most
// 255 characters, never cut inside a word. Literals, comments, parameters
// and everything else are left out: the summary holds nothing the caller
// sent as data. It is lexical: a function call's or a view's reads are
// not seen.

// maxSummary is the longest db.query.summary, in bytes.
const maxSummary = 255

// summarize returns the statement's operation (db.operation.name: the
// command of a single statement; for WITH, the command of its main
// statement; "" for several statements or none) and its summary.
func summarize(query string) (operation, summary string) {
	return scan(query, true)
}

// scan is summarize; without withSummary it makes only the operation, and
// allocates nothing.
func scan(query string, withSummary bool) (operation, summary string) {
	var (
		depth    int
		expect   bool // the next word is a target (after FROM, JOIN, INTO, ...)
		list     bool // in a FROM list: a comma at listDepth expects another target
		lDepth   int
		first    = true // the next word starts a statement
		cte      bool   // the statement started with WITH: its main command comes at depth 0
		stmts    int
		prevWord string
		fromish  bool // the target expected is in FROM, JOIN or USING, where a name may be a function's
	)
	sum := summaryBuf{on: withSummary}
	add := sum.add
	for i := 0; i < len(query); {
		c := query[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			for i < len(query) && query[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(query) && query[i+1] == '*':
			nest := 0
			for i < len(query) {
				if strings.HasPrefix(query[i:], "/*") {
					nest++
					i += 2
				} else if strings.HasPrefix(query[i:], "*/") {
					nest--
					i += 2
					if nest == 0 {
						break
					}
				} else {
					i++
				}
			}
		case c == '\'':
			// A string (E'' strings' backslashes: \' does not end it).
			esc := i > 0 && (query[i-1] == 'E' || query[i-1] == 'e')
			i++
			for i < len(query) {
				if esc && query[i] == '\\' {
					i += 2
					continue
				}
				if query[i] == '\'' {
					if i+1 < len(query) && query[i+1] == '\'' {
						i += 2
						continue
					}
					i++
					break
				}
				i++
			}
			expect = false
		case c == '"':
			j := i + 1
			for j < len(query) {
				if query[j] == '"' {
					if j+1 < len(query) && query[j+1] == '"' {
						j += 2
						continue
					}
					j++
					break
				}
				j++
			}
			word := query[i:j]
			// A quoted name, possibly schema-qualified: "s"."t", s."t".
			for j < len(query) && query[j] == '.' {
				k := j + 1
				k = nameEnd(query, k)
				word = query[i:k]
				j = k
			}
			if expect {
				add(word)
				expect = false
			}
			i = j
			first = false
		case c == '$' && i+1 < len(query) && (query[i+1] == '$' || isLetter(query[i+1])):
			// A dollar-quoted string, or a parameter ($1 starts with a digit: below).
			j := i + 1
			for j < len(query) && (isLetter(query[j]) || isDigit(query[j])) {
				j++
			}
			if j < len(query) && query[j] == '$' {
				tag := query[i : j+1]
				end := strings.Index(query[j+1:], tag)
				if end < 0 {
					i = len(query)
				} else {
					i = j + 1 + end + len(tag)
				}
			} else {
				i = j
			}
			expect = false
		case c == '(':
			depth++
			i++
			expect = false
		case c == ')':
			depth--
			if list && depth < lDepth {
				list = false
			}
			i++
			expect = false
		case c == ',':
			i++
			expect = list && depth == lDepth
			fromish = expect
		case c == ';':
			i++
			first, cte, list, expect = true, false, false, false
		case isLetter(c):
			j := nameEnd(query, i)
			word := query[i:j]
			i = j
			up := keyword(word)
			if first {
				first = false
				stmts++
				if stmts == 1 {
					operation = word
				}
				cte = up == "WITH"
				if !cte {
					add(word)
				}
				expect, fromish = up == "UPDATE" || up == "TRUNCATE" || up == "LOCK" || up == "CALL", false
				list = false
				prevWord = up
				continue
			}
			switch {
			case expect && !isReserved(up):
				if !fromish || !call(query, i) {
					add(word) // not a function in FROM: generate_series(…)
				}
				expect = false
			case up == "SELECT" || up == "INSERT" || up == "UPDATE" || up == "DELETE" || up == "MERGE":
				switch prevWord {
				case "FOR", "KEY", "ON", "DO", "OR", "OF":
					// FOR UPDATE, FOR NO KEY UPDATE, ON DELETE, ON CONFLICT
					// DO UPDATE, WHEN MATCHED THEN UPDATE's kin: clauses of
					// the statement, not operations of their own.
					prevWord = up
					continue
				}
				if cte && depth == 0 && stmts == 1 && operation != "" && strings.EqualFold(operation, "WITH") {
					operation = word
				}
				add(word)
				expect = up == "UPDATE"
				list = false
			case up == "FROM" || up == "JOIN" || up == "INTO" || up == "USING" || up == "TABLE":
				expect = true
				fromish = up != "INTO" && up != "TABLE"
				if up == "FROM" || up == "USING" {
					list, lDepth = true, depth
				}
			case up == "ONLY" || up == "LATERAL":
				// FROM ONLY t, JOIN LATERAL: the target follows.
			default:
				if list && depth == lDepth && isClause(up) && up != "JOIN" {
					list = false
				}
				expect = false
			}
			prevWord = up
		default:
			i++
			if c != '.' {
				expect = false
			}
		}
	}
	if stmts != 1 || strings.EqualFold(operation, "WITH") {
		operation = ""
	}
	return operation, sum.b.String()
}

// summaryBuf is where scan writes a summary: at most maxSummary bytes,
// whole words only; nothing when not on.
type summaryBuf struct {
	b    strings.Builder
	on   bool
	full bool
}

func (s *summaryBuf) add(w string) {
	if s.full || !s.on {
		return
	}
	n := s.b.Len()
	if n > 0 {
		n++
	}
	if n+len(w) > maxSummary {
		s.full = true
		return
	}
	if s.b.Len() > 0 {
		s.b.WriteByte(' ')
	}
	s.b.WriteString(w)
}

// nameEnd returns the end of the name (possibly qualified, possibly
// quoted in parts) that starts at i.
func nameEnd(s string, i int) int {
	for {
		if i < len(s) && s[i] == '"' {
			i++
			for i < len(s) {
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						i += 2
						continue
					}
					i++
					break
				}
				i++
			}
		} else {
			for i < len(s) && (isLetter(s[i]) || isDigit(s[i]) || s[i] == '$') {
				i++
			}
		}
		if i+1 < len(s) && s[i] == '.' && (isLetter(s[i+1]) || s[i+1] == '"') {
			i++
			continue
		}
		return i
	}
}

func isLetter(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isReserved reports whether an uppercased word cannot be a target where
// one is expected (a subquery's SELECT, FROM ONLY, ...).
func isReserved(up string) bool {
	switch up {
	case "SELECT", "VALUES", "ONLY", "LATERAL", "WITH", "TABLE", "DEFAULT", "ROWS", "UNNEST", "GENERATE_SERIES":
		return true
	}
	return false
}

// isClause reports whether an uppercased word ends a FROM list.
func isClause(up string) bool {
	switch up {
	case "WHERE", "GROUP", "HAVING", "WINDOW", "ORDER", "LIMIT", "OFFSET", "FETCH", "FOR", "UNION", "INTERSECT", "EXCEPT", "ON", "RETURNING", "SET", "JOIN", "INNER", "LEFT", "RIGHT", "FULL", "CROSS", "NATURAL":
		return true
	}
	return false
}

// call reports whether the name that ended at i is called: a "(" follows.
func call(s string, i int) bool {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i < len(s) && s[i] == '('
}

// operationOf is summarize's operation alone, without building the
// summary: the duration histogram's db.operation.name, per statement.
func operationOf(query string) (string, bool) {
	op, _ := scan(query, false)
	return op, op != ""
}

// keyword returns word in upper case when it is one of the keywords scan
// looks for, else "" (without allocating).
func keyword(word string) string {
	var buf [16]byte
	if len(word) > len(buf) {
		return ""
	}
	for i := 0; i < len(word); i++ {
		c := word[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		buf[i] = c
	}
	return keywords[string(buf[:len(word)])]
}

// keywords are the words scan looks for, upper case, each its own value.
var keywords = map[string]string{}

func init() {
	for _, k := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "WITH", "FROM", "JOIN", "INTO", "USING",
		"TABLE", "ONLY", "LATERAL", "FOR", "KEY", "ON", "DO", "OR", "OF", "TRUNCATE", "LOCK", "CALL",
		"VALUES", "DEFAULT", "ROWS", "UNNEST", "GENERATE_SERIES", "WHERE", "GROUP", "HAVING", "WINDOW",
		"ORDER", "LIMIT", "OFFSET", "FETCH", "UNION", "INTERSECT", "EXCEPT", "RETURNING", "SET",
		"INNER", "LEFT", "RIGHT", "FULL", "CROSS", "NATURAL"} {
		keywords[k] = k
	}
}
