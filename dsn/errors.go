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
type secrets struct {
	set map[string]struct{}
	// short tells that a candidate was too short to scrub.
	short bool
}

// add records v, unless it is too short to scrub.
func (s *secrets) add(v string) {
	switch {
	case v == "":
		return
	case len(v) < minSecret:
		s.short = true
		return
	}
	if s.set == nil {
		s.set = make(map[string]struct{})
	}
	s.set[v] = struct{}{}
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
	if masked, ok := s.mask(text); ok {
		return masked
	}
	return fallback
}

// mask returns text with every secret replaced by [mask], and whether that
// removed them all (it does not for a secret made of the mask's own
// letters).
func (s secrets) mask(text string) (string, bool) {
	if len(s.set) == 0 {
		return text, true
	}
	sorted := slices.Collect(maps.Keys(s.set))
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
			return "", false
		}
	}
	return text, true
}

// newSecrets gathers every password candidate of connString, leniently, so
// that malformed input is covered too: it over-collects rather than miss
// one. Candidates only ever cause over-redaction. The passwords of the
// environment are among them.
func newSecrets(connString string) secrets {
	s := stringSecrets(connString)
	for _, env := range []string{"PGPASSWORD", "PGSSLPASSWORD"} {
		s.add(os.Getenv(env))
	}
	return s
}

// stringSecrets is newSecrets without the environment.
func stringSecrets(connString string) secrets {
	var s secrets
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

// kvSpace is the whitespace of keyword/value syntax.
const kvSpace = " \t\n\r\v\f"

// cutScheme returns what follows the scheme when s is a URL, as pgx decides
// it (case-sensitively).
func cutScheme(s string) (string, bool) {
	if p, ok := strings.CutPrefix(s, "postgresql://"); ok {
		return p, true
	}
	return strings.CutPrefix(s, "postgres://")
}

// unescapeKV applies keyword/value syntax's backslash rule: a backslash is
// dropped and the byte after it taken literally; one at the very end is
// dropped.
func unescapeKV(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			if i == len(s) {
				break
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// uriDecodeLenient decodes what percent-encoding it can and passes the rest
// through; it is for finding secrets, in malformed input too.
func uriDecodeLenient(raw string) string {
	if !strings.Contains(raw, "%") {
		return strings.Trim(raw, " ")
	}
	raw = strings.Trim(raw, " ")
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); i++ {
		if raw[i] == '%' && i+2 < len(raw) {
			hi, ok1 := unhex(raw[i+1])
			lo, ok2 := unhex(raw[i+2])
			if ok1 && ok2 {
				b.WriteByte(hi<<4 | lo)
				i += 2
				continue
			}
		}
		b.WriteByte(raw[i])
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
