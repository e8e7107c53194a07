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
// the key at fault, the value and the rule broken, and never contains a
// password: not the URL's userinfo password, not a password= or sslpassword=
// value (also percent-encoded or quoted), not PGPASSWORD, and not when pgx's
// own error would quote the connection string. A password shorter than four
// bytes is the exception: it cannot be kept out of any text.
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

// minSecret is the shortest secret that is scrubbed from error texts: a
// shorter one is a substring of almost any text.
const minSecret = 4

// secrets is the set of strings that must not appear in an error text:
// every password candidate of one connection string.
type secrets map[string]struct{}

// add records v, unless it is too short to scrub.
func (s *secrets) add(v string) {
	if len(v) < minSecret {
		return
	}
	if *s == nil {
		*s = make(secrets)
	}
	(*s)[v] = struct{}{}
}

// addRaw records v as written and decoded: percent-decoded and with
// keyword/value backslash escapes removed.
func (s *secrets) addRaw(v string) {
	s.add(v)
	s.add(uriDecodeLenient(v))
	s.add(unescapeKV(v))
}

// scrub returns text with every secret replaced by [mask]. When the
// replacement cannot remove them all (a secret made of the mask's own
// letters), it returns fallback instead.
func (s secrets) scrub(text, fallback string) string {
	if len(s) == 0 {
		return text
	}
	sorted := slices.Collect(maps.Keys(s))
	slices.SortFunc(sorted, func(a, b string) int { // longest first
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
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

// newSecrets gathers every password candidate of connString, leniently, so
// that malformed input is covered too: it over-collects rather than miss
// one. Candidates only ever cause over-redaction.
func newSecrets(connString string) secrets {
	var s secrets
	for _, env := range []string{"PGPASSWORD", "PGSSLPASSWORD"} {
		s.add(os.Getenv(env))
	}
	collectKVSecrets(connString, &s)
	if p, ok := cutScheme(connString); ok {
		collectURLSecrets(p, &s)
	}
	return s
}

// collectKVSecrets finds every "password" = value in s, as keyword/value
// syntax would read it, quoted or not (this also catches sslpassword, and
// password= in a URL query).
func collectKVSecrets(s string, sec *secrets) {
	for rest := s; ; {
		i := strings.Index(rest, "password")
		if i < 0 {
			return
		}
		rest = rest[i+len("password"):]
		v := strings.TrimLeft(rest, kvSpace)
		if !strings.HasPrefix(v, "=") {
			continue
		}
		v = strings.TrimLeft(v[1:], kvSpace)
		if strings.HasPrefix(v, "'") {
			end := 1
			for end < len(v) && v[end] != '\'' {
				if v[end] == '\\' {
					end++
				}
				end++
			}
			sec.addRaw(v[1:min(end, len(v))])
			continue
		}
		end := strings.IndexAny(v, kvSpace)
		if end < 0 {
			end = len(v)
		}
		sec.addRaw(v[:end])
		if amp := strings.IndexByte(v[:end], '&'); amp >= 0 {
			sec.addRaw(v[:amp])
		}
		// As keyword/value syntax reads it: a backslash escapes a space.
		escaped := 0
		for escaped < len(v) && strings.IndexByte(kvSpace, v[escaped]) < 0 {
			if v[escaped] == '\\' {
				escaped++
			}
			escaped++
		}
		sec.addRaw(v[:min(escaped, len(v))])
	}
}

// collectURLSecrets finds the userinfo password of a URL (p is what follows
// the scheme) where pgx would find it, and also where a malformed URL may
// have stranded it (before the first and the last '@'), and every query
// value whose percent-decoded key is password or sslpassword.
func collectURLSecrets(p string, sec *secrets) {
	for _, at := range []int{strings.IndexByte(p, '@'), strings.LastIndexByte(p, '@')} {
		if at < 0 {
			continue
		}
		if colon := strings.IndexByte(p[:at], ':'); colon >= 0 {
			sec.addRaw(p[colon+1 : at])
			if slash := strings.IndexAny(p[colon+1:at], "/?"); slash >= 0 {
				sec.addRaw(p[colon+1 : colon+1+slash])
			}
		}
	}
	if q := strings.IndexByte(p, '?'); q >= 0 {
		for pair := range strings.SplitSeq(p[q+1:], "&") {
			k, v, _ := strings.Cut(pair, "=")
			switch uriDecodeLenient(k) {
			case "password", "sslpassword":
				sec.addRaw(v)
			}
		}
	}
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
