package dsn

import (
	"errors"
	"strings"
)

// This file splits a connection string into its pgrouted_ settings and the
// rest, which pgx then parses. The tokenizers follow pgconn's own
// (parseKeywordValueSettings, parseURLSettings in pgx v5.12) step by step,
// so that the rest means to pgx exactly what it meant in the whole string.
// Where they find the string malformed, pgx would too: Parse then lets pgx
// parse the whole string, for pgx's own error.

// kvSpace is the whitespace of keyword/value syntax.
const kvSpace = " \t\n\r\v\f"

// routingPrefix starts every pgrouted key. It is matched ignoring case, so
// that PGROUTED_MAX_LAG is reported as a misspelt key rather than sent to
// the server as a runtime parameter.
const routingPrefix = "pgrouted_"

func isRoutingKey(k string) bool {
	return len(k) >= len(routingPrefix) && strings.EqualFold(k[:len(routingPrefix)], routingPrefix)
}

// setting is one pgrouted_ key = value, decoded, as written.
type setting struct{ key, value string }

// form is the syntax of a connection string.
type form uint8

const (
	formKV  form = iota // keyword/value: host=h1,h2 port=5432
	formURL             // postgres://u@h1,h2/db?...
)

// source is a connection string less its pgrouted_ keys, kept in pieces so
// that it can be written back with or without its passwords.
type source struct {
	form form

	// keyword/value form: the pairs that stay, in order.
	pairs []kvPair

	// URL form.
	scheme   string    // "postgres://" or "postgresql://"
	userinfo string    // raw, without the '@'; meaningful when hasUser
	hasUser  bool      // there is a userinfo part
	hostpath string    // raw host list and path, up to the query
	query    []urlPair // the query pairs that stay, raw

	// addrs are the Addr of each host as parsed, to tell whether the
	// Hosts of a Config still are the ones of this source.
	addrs []string
}

type kvPair struct{ key, value string }

type urlPair struct{ raw, key string } // raw "k=v" and the decoded key

// split splits connString into its pgrouted_ settings and the rest.
func split(connString string) (*source, []setting, error) {
	if p, ok := cutScheme(connString); ok {
		return splitURL(connString[:len(connString)-len(p)], p)
	}
	return splitKV(connString)
}

// cutScheme returns what follows the scheme when s is a URL, as pgx decides
// it (case-sensitively).
func cutScheme(s string) (string, bool) {
	if p, ok := strings.CutPrefix(s, "postgresql://"); ok {
		return p, true
	}
	return strings.CutPrefix(s, "postgres://")
}

var errMalformed = errors.New("malformed connection string")

// splitKV tokenizes keyword/value syntax like pgconn's
// parseKeywordValueSettings.
func splitKV(s string) (*source, []setting, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, nil, errMalformed
	}
	src := &source{form: formKV}
	var routing []setting
	s = strings.TrimLeft(s, kvSpace)
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, nil, errMalformed
		}
		key := strings.Trim(s[:eq], kvSpace)
		if key == "" || strings.ContainsAny(key, kvSpace) {
			return nil, nil, errMalformed
		}
		s = strings.TrimLeft(s[eq+1:], kvSpace)
		var val string
		switch {
		case len(s) == 0:
		case s[0] != '\'':
			end := 0
			for ; end < len(s); end++ {
				if strings.IndexByte(kvSpace, s[end]) >= 0 {
					break
				}
				if s[end] == '\\' {
					end++
					if end == len(s) {
						break
					}
				}
			}
			val = unescapeKV(s[:end])
			s = strings.TrimLeft(s[end:], kvSpace)
		default:
			s = s[1:]
			end := 0
			for ; end < len(s); end++ {
				if s[end] == '\'' {
					break
				}
				if s[end] == '\\' {
					end++
					if end == len(s) {
						return nil, nil, errMalformed
					}
				}
			}
			if end == len(s) {
				return nil, nil, errMalformed
			}
			val = unescapeKV(s[:end])
			s = strings.TrimLeft(s[end+1:], kvSpace)
		}
		if isRoutingKey(key) {
			routing = append(routing, setting{key, val})
			continue
		}
		src.pairs = append(src.pairs, kvPair{key, val})
	}
	return src, routing, nil
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

// quoteKV writes v so that keyword/value syntax reads it back as v: bare
// when it can, else in single quotes with \ and ' escaped.
func quoteKV(v string) string {
	if v != "" && !strings.ContainsAny(v, kvSpace+`'\`) {
		return v
	}
	var b strings.Builder
	b.Grow(len(v) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(v); i++ {
		if v[i] == '\'' || v[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
	b.WriteByte('\'')
	return b.String()
}

// splitURL tokenizes a connection URI like pgconn's parseURLSettings; p is
// what follows the scheme.
func splitURL(scheme, p string) (*source, []setting, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return nil, nil, errMalformed
	}
	src := &source{form: formURL, scheme: scheme}
	// Userinfo: only a '/' stops the look-ahead for its '@'.
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		src.hasUser = true
		src.userinfo = p[:i]
		p = p[i+1:]
	}
	rest := p
	// Hosts and ports: netloc[:port] separated by commas.
	for {
		if strings.HasPrefix(p, "[") {
			end := strings.IndexByte(p, ']')
			if end <= 1 {
				return nil, nil, errMalformed
			}
			p = p[end+1:]
			if p != "" && strings.IndexByte(":/?,", p[0]) < 0 {
				return nil, nil, errMalformed
			}
		} else {
			i := strings.IndexAny(p, ":/?,")
			if i < 0 {
				i = len(p)
			}
			p = p[i:]
		}
		if strings.HasPrefix(p, ":") {
			p = p[1:]
			i := strings.IndexAny(p, "/?,")
			if i < 0 {
				i = len(p)
			}
			p = p[i:]
		}
		if !strings.HasPrefix(p, ",") {
			break
		}
		p = p[1:]
	}
	if strings.HasPrefix(p, "/") {
		if i := strings.IndexByte(p, '?'); i >= 0 {
			p = p[i:]
		} else {
			p = ""
		}
	}
	// The userinfo, hosts, ports and path stay as written: pgx decodes them.
	src.hostpath = rest[:len(rest)-len(p)]
	var routing []setting
	if strings.HasPrefix(p, "?") {
		params := p[1:]
		for params != "" {
			pair := params
			if i := strings.IndexByte(params, '&'); i >= 0 {
				pair, params = params[:i], params[i+1:]
			} else {
				params = ""
			}
			rawKey, rawValue, found := strings.Cut(pair, "=")
			if !found || strings.Contains(rawValue, "=") {
				return nil, nil, errMalformed
			}
			key, err := uriDecode(rawKey)
			if err != nil {
				return nil, nil, err
			}
			value, err := uriDecode(rawValue)
			if err != nil {
				return nil, nil, err
			}
			if isRoutingKey(key) {
				routing = append(routing, setting{key, value})
				continue
			}
			src.query = append(src.query, urlPair{raw: pair, key: key})
		}
	}
	return src, routing, nil
}

// uriDecode percent-decodes a URI component by libpq's rules, as pgconn
// does: %XX with two hex digits, %00 forbidden, leading and trailing spaces
// skipped, interior spaces rejected.
func uriDecode(raw string) (string, error) {
	if !strings.ContainsAny(raw, "% ") {
		return raw, nil
	}
	var b strings.Builder
	b.Grow(len(raw))
	i := 0
	for i < len(raw) && raw[i] == ' ' {
		i++
	}
	for i < len(raw) && raw[i] != ' ' {
		if raw[i] != '%' {
			b.WriteByte(raw[i])
			i++
			continue
		}
		if i+2 >= len(raw) {
			return "", errMalformed
		}
		hi, ok1 := unhex(raw[i+1])
		lo, ok2 := unhex(raw[i+2])
		if !ok1 || !ok2 || hi<<4|lo == 0 {
			return "", errMalformed
		}
		b.WriteByte(hi<<4 | lo)
		i += 3
	}
	for i < len(raw) && raw[i] == ' ' {
		i++
	}
	if i < len(raw) {
		return "", errMalformed
	}
	return b.String(), nil
}

// uriDecodeLenient decodes what percent-encoding it can and passes the rest
// through; it is for finding secrets in malformed input.
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

// encodeURL percent-encodes v for a URI query value, keeping the bytes that
// need no encoding and the comma of pgrouted's lists.
func encodeURL(v string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(v))
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~,:", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// String writes the source back; with redact, passwords are masked.
func (s *source) String(redact bool) string {
	var b strings.Builder
	switch s.form {
	case formKV:
		for i, p := range s.pairs {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(p.key)
			b.WriteByte('=')
			if redact && isSecretKey(p.key) {
				b.WriteString(mask)
			} else {
				b.WriteString(quoteKV(p.value))
			}
		}
	case formURL:
		b.WriteString(s.scheme)
		if s.hasUser {
			user, password, hasPassword := strings.Cut(s.userinfo, ":")
			if redact && hasPassword && password != "" {
				b.WriteString(user + ":" + mask)
			} else {
				b.WriteString(s.userinfo)
			}
			b.WriteByte('@')
		}
		b.WriteString(s.hostpath)
		for i, q := range s.query {
			if i == 0 {
				b.WriteByte('?')
			} else {
				b.WriteByte('&')
			}
			if redact && isSecretKey(q.key) {
				k, _, _ := strings.Cut(q.raw, "=")
				b.WriteString(k + "=" + mask)
			} else {
				b.WriteString(q.raw)
			}
		}
	}
	return b.String()
}

// isSecretKey reports whether a libpq key holds a password.
func isSecretKey(k string) bool { return k == "password" || k == "sslpassword" }
