package dsn

import (
	"errors"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ParseError is the error of [Parse] and [Config.Validate]. Its text names
// the key at fault, the value and the rule broken. It never shows the
// connection string, and never a password that pgx reads from it, from
// PGPASSWORD or from the passfile, nor PGSSLPASSWORD, wherever else that
// password appears (as a host name, in a pgrouted_ value). pgx's own
// message, when pgx rejects the string, is shown without the string it
// quotes; pgx keeps the values of password and sslpassword out of it. A
// password shorter than four bytes is the exception: it cannot be kept out
// of any text. A byte that is not UTF-8 and a control or format character
// in a value it quotes are written as escapes (\xff, \u202e), so that the
// text cannot break or reorder a log line or a terminal.
type ParseError struct {
	// Key is the key at fault ("pgrouted_max_lag", "host",
	// "target_session_attrs"), or "" when pgx rejected the connection
	// string without naming one.
	Key string

	msg string // already free of secrets
	err error
}

// Error implements error.
func (e *ParseError) Error() string { return "pgrouted dsn: " + e.msg }

// Unwrap returns the underlying error: when pgx rejected the connection
// string, a copy of pgx's [*pgconn.ParseConfigError] whose ConnString has
// its passwords masked as xxxxx (in a URL where pgconn's own redaction
// finds them, in a keyword/value string the value of every key that
// contains "password", to the end of the string when a quote is not
// closed), and whose own underlying error shows no password either; else
// nil. So a logger that prints the chain, or walks it by reflection, finds
// no password in it.
func (e *ParseError) Unwrap() error { return e.err }

// mask replaces a secret in texts and redacted connection strings.
const mask = "xxxxx"

// minSecret is the shortest secret that is scrubbed from texts by its
// value: a shorter one is a substring of almost any text.
const minSecret = 4

// secrets is the set of passwords that must not appear in a text, found by
// their values as pgx decoded them.
type secrets struct{ set map[string]struct{} }

// add records v, unless it is too short to scrub.
func (s *secrets) add(v string) {
	if len(v) < minSecret {
		return
	}
	if s.set == nil {
		s.set = make(map[string]struct{})
	}
	s.set[v] = struct{}{}
}

// envSecrets returns the passwords of the environment.
func envSecrets() secrets {
	var s secrets
	s.add(os.Getenv("PGPASSWORD"))
	s.add(os.Getenv("PGSSLPASSWORD"))
	return s
}

// scrub returns text with every secret replaced by [mask]. When the
// replacement cannot remove them all (a secret made of the mask's own
// letters), it returns fallback instead.
func (s secrets) scrub(text, fallback string) string {
	sorted := slices.SortedFunc(maps.Keys(s.set), func(a, b string) int { // longest first
		return len(b) - len(a)
	})
	for _, v := range sorted {
		text = strings.ReplaceAll(text, v, mask)
	}
	for _, v := range sorted {
		if strings.Contains(text, v) {
			return fallback
		}
	}
	return text
}

// pgxDetail returns the text of an error from pgx's ParseConfig without the
// connection string that pgx quotes in it.
func pgxDetail(err error) string {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return err.Error()
	}
	bare := *pce
	bare.ConnString = ""
	text := bare.Error()
	if rest, ok := strings.CutPrefix(text, "cannot parse ``: "); ok {
		return rest
	}
	return text
}

// newError returns a *ParseError for key with msg, scrubbed of sec and made
// printable; err, pgx's error, is kept as a copy without passwords.
func newError(sec secrets, key, msg string, err error) *ParseError {
	key = sec.scrub(Printable(sec.scrub(key, "")), "")
	fallback := "invalid value"
	if key != "" {
		fallback = "invalid value of " + key
	}
	fallback = sec.scrub(fallback, "invalid value")
	msg = sec.scrub(Printable(sec.scrub(msg, fallback)), fallback)
	if err != nil {
		err = redactPgxError(err, sec)
	}
	return &ParseError{Key: key, msg: msg, err: err}
}

// redactPgxError returns a copy of err, an error of pgx's ParseConfig,
// without a password: a [*pgconn.ParseConfigError] with its ConnString
// masked ([redactConnString]) and its message and underlying error
// scrubbed of sec. An error of another type becomes a plain error with its
// text scrubbed.
func redactPgxError(err error, sec secrets) error {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return errors.New(sec.scrub(err.Error(), mask))
	}
	inner := pce.Unwrap()
	msg := pgxDetail(pce)
	if inner != nil {
		msg = strings.TrimSuffix(msg, " ("+inner.Error()+")")
		if text := inner.Error(); sec.scrub(text, "") != text {
			inner = errors.New(sec.scrub(text, mask))
		}
	}
	return pgconn.NewParseConfigError(redactConnString(pce.ConnString, sec), sec.scrub(msg, mask), inner)
}

// redactConnString returns the connection string s with its passwords
// masked: a URL by pgconn's own redaction (the userinfo password, and
// password and sslpassword in the query, however encoded), a
// keyword/value string by maskKVPasswords; then every secret of sec,
// wherever it stands. When a secret cannot be masked it returns the mask
// alone.
func redactConnString(s string, sec secrets) string {
	r := maskKVPasswords(s)
	if _, ok := cutScheme(s); ok {
		if r = redactURL(s); r == "" {
			return mask // another pgx's wording: nothing to trust
		}
	}
	return sec.scrub(r, mask)
}

// maskKVPasswords returns s, a keyword/value connection string that may
// not parse, with the value of every key whose name contains "password"
// (password, sslpassword, in any case) replaced by the mask. It reads
// values as libpq does, quoted ('a \' b') or not (a\ b), spaces allowed
// around "="; where it cannot tell the end of a value (a quote not
// closed), it masks to the end of the string: it may mask too much, never
// too little.
func maskKVPasswords(s string) string {
	var b strings.Builder
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' }
	i := 0
	for i < len(s) {
		// A key: up to "=" or a space.
		start := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[start:i]
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) || s[i] != '=' {
			b.WriteString(s[start:i])
			if i < len(s) && i == start {
				b.WriteByte(s[i])
				i++
			}
			continue
		}
		i++ // "="
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		b.WriteString(s[start:i])
		// The value.
		vstart := i
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i+1, len(s)) // the closing quote
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i, len(s))
		}
		if strings.Contains(strings.ToLower(key), "password") {
			b.WriteString(mask)
		} else {
			b.WriteString(s[vstart:i])
		}
	}
	return b.String()
}

// cutScheme returns what follows the scheme when s is a URL, as pgx decides
// it (case-sensitively).
func cutScheme(s string) (string, bool) {
	if p, ok := strings.CutPrefix(s, "postgresql://"); ok {
		return p, true
	}
	return strings.CutPrefix(s, "postgres://")
}
