package dsn

import (
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Format writes cfg as a connection string that [Parse] turns back into an
// equal Config (in the same environment: PG* variables, passfile and
// service file are read again). It contains the password, if the
// connection string had one; [Config.Redacted] is the same string without.
//
// For a parsed Config whose Hosts are still the parsed ones, that is the
// connection string it was parsed from, as it was given, followed by the
// routing keys whose value now differs from the one that string gives:
// the last of a repeated key wins, so they override its own. When cfg was
// built in code, or its Hosts no longer are the parsed ones, the PostgreSQL
// part is written from the hosts' ConnConfigs as keyword/value: host, port,
// dbname, user, password, sslmode (as the TLS configurations show it),
// connect_timeout and the other settings pgx keeps, and runtime parameters;
// TLS material that came from files (sslrootcert, sslcert, sslkey) cannot
// be recovered there and is left out. Then come the routing keys whose
// value differs from its default. Changes made in code to a parsed host's
// ConnConfig are not seen.
//
// The routing keys are written in a fixed order: the order of the table in
// [Parse].
func Format(cfg *Config) string {
	if cfg == nil {
		return ""
	}
	return format(cfg, false)
}

// source is the connection string a Config was parsed from. It is kept as
// given, and never taken apart again: only pgx reads it.
type source struct {
	raw string // pgrouted_ keys, passwords and all
	// parsed is the Config that raw gives, its hosts without their
	// ConnConfigs: what Format compares a Config with, to tell what
	// changed since.
	parsed Config
}

func format(c *Config, redact bool) string {
	if redact && endpointPasswords(c) {
		// A Patroni URL's password may sit in the source string in any
		// encoding: write the string afresh, the URLs redacted.
		cc := *c
		cc.src = nil
		cc.PatroniEndpoints = redactEndpoints(c.PatroniEndpoints)
		return synthesize(&cc, true)
	}
	if c.src == nil || !c.hostsUnchanged() {
		return synthesize(c, redact)
	}
	s := appendRouting(c.src.raw, routingPairs(c, routingValues(&c.src.parsed, false)))
	if !redact {
		return s
	}
	if masked, ok := redactSource(s, c.Hosts); ok {
		return masked
	}
	return synthesize(c, true)
}

// redactSource masks the passwords of s, a connection string as given plus
// routing keys, and reports whether it could. In a URL they are masked
// where pgx finds them (the userinfo, the password and sslpassword query
// values). In either form, every password candidate (found leniently in
// keyword/value syntax, and the hosts' passwords as pgx decoded them) is
// then masked wherever it occurs. A candidate too short for that, in
// keyword/value form, and one made of the mask's own letters, cannot be
// masked by its value: the caller writes the string from the hosts then,
// where the password has a place of its own.
func redactSource(s string, hosts []Host) (string, bool) {
	var sec secrets
	_, isURL := cutScheme(s)
	if isURL {
		s = maskURL(s)
	} else {
		collectKVSecrets(s, &sec)
	}
	for _, h := range hosts {
		if h.ConnConfig != nil {
			sec.add(h.ConnConfig.Password)
		}
	}
	if sec.short && !isURL {
		return "", false
	}
	return sec.mask(s)
}

// maskURL masks the userinfo password and the password and sslpassword
// query values of a connection URI.
func maskURL(s string) string {
	p, _ := cutScheme(s)
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:len(s)-len(p)])
	q := urlQueryStart(p)
	head, query := p, ""
	if q >= 0 {
		head, query = p[:q], p[q+1:]
	}
	if i := strings.IndexAny(head, "@/"); i >= 0 && head[i] == '@' {
		user, password, hasPassword := strings.Cut(head[:i], ":")
		if hasPassword && password != "" {
			b.WriteString(user + ":" + mask)
		} else {
			b.WriteString(head[:i])
		}
		head = head[i:]
	}
	b.WriteString(head)
	if q < 0 {
		return b.String()
	}
	b.WriteByte('?')
	for i, pair := range strings.Split(query, "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		k, _, found := strings.Cut(pair, "=")
		if d := uriDecodeLenient(k); found && (d == "password" || d == "sslpassword") {
			b.WriteString(k + "=" + mask)
			continue
		}
		b.WriteString(pair)
	}
	return b.String()
}

// appendRouting writes pairs after the connection string raw, in its form.
func appendRouting(raw string, pairs []kvPair) string {
	if len(pairs) == 0 {
		return raw
	}
	var b strings.Builder
	if p, ok := cutScheme(raw); ok {
		b.WriteString(raw)
		sep := "?"
		if q := urlQueryStart(p); q >= 0 {
			sep = "&"
			// An empty pair is only allowed at the end: after an empty
			// query ("…?") or a trailing "&", append without one. A "?"
			// at the end of a non-empty query is part of its last value
			// (postgres://h?a=?).
			if q == len(p)-1 || strings.HasSuffix(raw, "&") {
				sep = ""
			}
		}
		for _, kv := range pairs {
			b.WriteString(sep + kv.key + "=" + encodeURL(kv.value))
			sep = "&"
		}
		return b.String()
	}
	// A backslash at the very end escapes the end of the string, and pgx
	// drops it; before an appended key it would escape the space instead.
	n := len(raw) - len(strings.TrimRight(raw, `\`))
	if n%2 == 1 {
		raw = raw[:len(raw)-1]
	}
	b.WriteString(raw)
	if kvEndsEmpty(raw) {
		b.WriteString("''") // else the appended key would be its value
	}
	for _, kv := range pairs {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(kv.key + "=" + quoteKV(kv.value))
	}
	return b.String()
}

// kvEndsEmpty reports whether s, a keyword/value connection string that pgx
// accepted, ends with a key and '=' and nothing else ("dbname="): a key
// whose value is empty, and would be whatever follows. It walks the pairs
// as pgconn's parseKeywordValueSettings does (libpq's syntax).
func kvEndsEmpty(s string) bool {
	s = strings.TrimLeft(s, kvSpace)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return false
		}
		s = strings.TrimLeft(s[eq+1:], kvSpace)
		if s == "" {
			return true
		}
		end, stop := 0, func(c byte) bool { return strings.IndexByte(kvSpace, c) >= 0 }
		if s[0] == '\'' {
			end, stop = 1, func(c byte) bool { return c == '\'' }
		}
		for end < len(s) && !stop(s[end]) {
			if s[end] == '\\' {
				end++
			}
			end++
		}
		if s[0] == '\'' {
			end++ // the closing quote
		}
		s = strings.TrimLeft(s[min(end, len(s)):], kvSpace)
	}
	return false
}

// urlQueryStart returns the index in p, what follows the scheme of a
// connection URI, of the '?' that starts its query, or -1. It reads the
// URI's outline as pgconn's parseURLSettings does (libpq's syntax): the
// userinfo ends at an '@' found before any '/', a host list element at the
// first of "/?," after an IPv6 address in brackets, and the path at the
// first '?'.
func urlQueryStart(p string) int {
	off := 0
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		off = i + 1
	}
	for {
		if strings.HasPrefix(p[off:], "[") {
			end := strings.IndexByte(p[off:], ']')
			if end < 0 {
				return -1
			}
			off += end + 1
		}
		i := strings.IndexAny(p[off:], "/?,")
		if i < 0 {
			return -1
		}
		off += i
		switch p[off] {
		case '?':
			return off
		case '/':
			if q := strings.IndexByte(p[off:], '?'); q >= 0 {
				return off + q
			}
			return -1
		}
		off++
	}
}

// hostsUnchanged reports whether c's hosts are still the ones its source
// string names.
func (c *Config) hostsUnchanged() bool {
	parsed := c.src.parsed.Hosts
	if len(c.Hosts) != len(parsed) {
		return false
	}
	for i, h := range c.Hosts {
		if h.Addr != parsed[i].Addr {
			return false
		}
	}
	return true
}

type kvPair struct{ key, value string }

// routingValues returns the value of each routing key in c, in table order;
// with defaults, the values that Parse gives c's hosts when the connection
// string sets no routing key.
func routingValues(c *Config, defaults bool) []string {
	src, name, weight := c, func(h Host) string { return h.Name }, func(h Host) string { return strconv.Itoa(h.Weight) }
	if defaults {
		src = defaultConfig()
		name = func(h Host) string { return h.Addr }
		weight = func(Host) string { return strconv.Itoa(DefaultWeight) }
	}
	out := make([]string, len(specs))
	for i, s := range specs {
		switch s.key {
		case keyNames:
			out[i] = joinHosts(c.Hosts, name)
		case keyWeights:
			out[i] = joinHosts(c.Hosts, weight)
		default:
			out[i] = s.get(src)
		}
	}
	return out
}

// routingPairs returns the routing keys of c whose value differs from the
// one in base (as routingValues gives it), in table order.
func routingPairs(c *Config, base []string) []kvPair {
	var out []kvPair
	for i, v := range routingValues(c, false) {
		if v != base[i] {
			out = append(out, kvPair{specs[i].key, v})
		}
	}
	return out
}

func joinHosts(hosts []Host, f func(Host) string) string {
	list := make([]string, len(hosts))
	for i, h := range hosts {
		list[i] = f(h)
	}
	return strings.Join(list, ",")
}

// synthesize writes c as a keyword/value connection string, the PostgreSQL
// part from the hosts' ConnConfigs, then the routing keys that differ from
// their defaults. Settings other than host and port are the first host's: a
// connection string gives all hosts the same.
func synthesize(c *Config, redact bool) string {
	kv := postgresPairs(c.Hosts)
	kv = append(kv, routingPairs(c, routingValues(c, true))...)
	var b strings.Builder
	for i, p := range kv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p.key)
		b.WriteByte('=')
		if redact && (p.key == "password" || p.key == "sslpassword") {
			b.WriteString(mask)
		} else {
			b.WriteString(quoteKV(p.value))
		}
	}
	return b.String()
}

// postgresPairs returns the keys that give hosts their ConnConfigs.
func postgresPairs(hosts []Host) []kvPair {
	var first, firstTCP *pgx.ConnConfig
	hostList := make([]string, len(hosts))
	portList := make([]string, len(hosts))
	for i, h := range hosts {
		cc := h.ConnConfig
		if cc == nil {
			host, port, err := net.SplitHostPort(h.Addr)
			if err != nil {
				host, port = h.Addr, ""
			}
			hostList[i], portList[i] = host, port
			continue
		}
		hostList[i], portList[i] = cc.Host, strconv.Itoa(int(cc.Port))
		if first == nil {
			first = cc
		}
		if network, _ := pgconn.NetworkAddress(cc.Host, cc.Port); network == "tcp" && firstTCP == nil {
			firstTCP = cc
		}
	}
	var kv []kvPair
	add := func(k, v string) { kv = append(kv, kvPair{k, v}) }
	add("host", strings.Join(hostList, ","))
	if len(portList) > 0 && !slices.ContainsFunc(portList, func(p string) bool { return p != portList[0] }) {
		portList = portList[:1] // one port for all
	}
	add("port", strings.Join(portList, ","))
	if first != nil {
		cc := first
		if cc.Database != "" {
			add("dbname", cc.Database)
		}
		if cc.User != "" {
			add("user", cc.User)
		}
		if cc.Password != "" {
			add("password", cc.Password)
		}
		if firstTCP != nil {
			mode, sni := sslMode(firstTCP)
			add("sslmode", mode)
			if !sni {
				add("sslsni", "0")
			}
		}
		if cc.SSLNegotiation != "" {
			add("sslnegotiation", cc.SSLNegotiation)
		}
		if cc.SSLCertMode != "" && cc.SSLCertMode != "allow" {
			add("sslcertmode", cc.SSLCertMode)
		}
		if cc.ConnectTimeout > 0 {
			add("connect_timeout", strconv.FormatInt(int64((cc.ConnectTimeout+time.Second-1)/time.Second), 10))
		}
		for _, p := range []kvPair{
			{"krbsrvname", cc.KerberosSrvName}, {"krbspn", cc.KerberosSpn}, {"require_auth", cc.RequireAuth},
		} {
			if p.value != "" {
				add(p.key, p.value)
			}
		}
		if cc.MinProtocolVersion != "" && cc.MinProtocolVersion != "3.0" {
			add("min_protocol_version", cc.MinProtocolVersion)
		}
		if cc.MaxProtocolVersion != "" && cc.MaxProtocolVersion != "3.0" {
			add("max_protocol_version", cc.MaxProtocolVersion)
		}
		if cc.ChannelBinding != "" && cc.ChannelBinding != "prefer" {
			add("channel_binding", cc.ChannelBinding)
		}
		if cc.StatementCacheCapacity != 512 {
			add("statement_cache_capacity", strconv.Itoa(cc.StatementCacheCapacity))
		}
		if cc.DescriptionCacheCapacity != 512 {
			add("description_cache_capacity", strconv.Itoa(cc.DescriptionCacheCapacity))
		}
		if cc.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
			add("default_query_exec_mode", strings.ReplaceAll(cc.DefaultQueryExecMode.String(), " ", "_"))
		}
		for _, k := range slices.Sorted(maps.Keys(cc.RuntimeParams)) {
			if !isRoutingKey(k) {
				add(k, cc.RuntimeParams[k])
			}
		}
	}
	return kv
}

// sslMode infers the sslmode that gives a TCP host's attempts their TLS
// configurations, and whether SNI is on.
func sslMode(cc *pgx.ConnConfig) (mode string, sni bool) {
	tc := cc.TLSConfig
	switch {
	case tc == nil && len(cc.Fallbacks) > 0 && cc.Fallbacks[0].TLSConfig != nil:
		mode, tc = "allow", cc.Fallbacks[0].TLSConfig
	case tc == nil:
		return "disable", true
	case len(cc.Fallbacks) > 0 && cc.Fallbacks[0].TLSConfig == nil:
		mode = "prefer"
	case tc.VerifyPeerCertificate != nil:
		mode = "verify-ca"
	case !tc.InsecureSkipVerify:
		return "verify-full", true
	default:
		mode = "require"
	}
	return mode, tc.ServerName != "" || net.ParseIP(cc.Host) != nil
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

// endpointPasswords reports whether a Patroni endpoint of c, or of the
// string it was parsed from, carries a password.
func endpointPasswords(c *Config) bool {
	var sec secrets
	collectEndpointSecrets(strings.Join(c.PatroniEndpoints, ","), &sec)
	if c.src != nil {
		collectEndpointSecrets(strings.Join(c.src.parsed.PatroniEndpoints, ","), &sec)
	}
	return len(sec.set) > 0 || sec.short
}
