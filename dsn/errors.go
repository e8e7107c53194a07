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
// of any text.
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

// Unwrap returns the underlying error: pgx's [*pgconn.ParseConfigError]
// when pgx rejected the connection string, else nil. Note that pgx's error
// text redacts passwords only on a best-effort basis.
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

// newError returns a *ParseError for key with msg, scrubbed of sec.
func newError(sec secrets, key, msg string, err error) *ParseError {
	key = sec.scrub(key, "")
	fallback := "invalid value"
	if key != "" {
		fallback = "invalid value of " + key
	}
	return &ParseError{Key: key, msg: sec.scrub(msg, sec.scrub(fallback, "invalid value")), err: err}
}

// cutScheme returns what follows the scheme when s is a URL, as pgx decides
// it (case-sensitively).
func cutScheme(s string) (string, bool) {
	if p, ok := strings.CutPrefix(s, "postgresql://"); ok {
		return p, true
	}
	return strings.CutPrefix(s, "postgres://")
}
