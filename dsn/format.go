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
// [Parse]. A zero field counts as its default.
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
	c = c.withDefaults()
	var s string
	if c.src != nil && c.hostsUnchanged() && !(redact && endpointPasswords(c)) {
		s = appendRouting(c.src.raw, routingPairs(c, routingValues(&c.src.parsed, false)))
		if redact {
			s = redactURL(s)
		}
	}
	if s == "" {
		if redact {
			// The Patroni URLs' passwords are not pgx's: mask them here.
			c.PatroniEndpoints = redactEndpoints(c.PatroniEndpoints)
		}
		s = synthesize(c, redact)
	}
	if !redact {
		return s
	}
	// A password may also stand where no rule masks it (as a host's name):
	// mask it wherever it is, and show nothing when that cannot be done (a
	// password made of the mask's letters).
	var sec secrets
	for _, h := range c.Hosts {
		if h.ConnConfig != nil {
			sec.add(h.ConnConfig.Password)
		}
	}
	return sec.scrub(s, mask)
}

// redactURL returns s, a connection URI that pgx accepts, with its
// passwords masked where pgconn finds them (the userinfo, and password and
// sslpassword in the query, in any encoding): pgconn's own redaction, as
// its ParseConfigError shows it, which is exact for a URI that parses. It
// returns "" for a keyword/value string, which is written afresh from the
// parsed settings instead: no reading of its escapes and quotes can then
// leave a piece of a password behind.
func redactURL(s string) string {
	if _, ok := cutScheme(s); !ok {
		return ""
	}
	text := pgconn.NewParseConfigError(s, "", nil).Error()
	text, ok1 := strings.CutPrefix(text, "cannot parse `")
	text, ok2 := strings.CutSuffix(text, "`: ")
	if !ok1 || !ok2 {
		return "" // another pgx's wording: write it afresh
	}
	return text
}

// appendRouting writes pairs after the connection string raw, in its form,
// so that the last of each key, theirs, wins. It returns "" when pgx does
// not read them back from any of the ways of joining them that it tries.
//
// Where the pairs go is pgx's to say, not a tokenizer's: a URI takes them
// after "&", or "?" when it has no query, or nothing after a query that
// ends empty ("…?", "…&"); a keyword/value string after a space, or after
// ” when it ends on a key whose value is empty ("dbname=", which would
// take the next word as its value). The first whose pgx parse gives every
// pair its value is the one. A wrong join never passes: the pairs would
// vanish into the value before them.
func appendRouting(raw string, pairs []kvPair) string {
	if len(pairs) == 0 {
		return raw
	}
	base, seps, join, quote := raw, []string{"&", "?", ""}, "&", encodeURL
	if _, ok := cutScheme(raw); !ok {
		// A backslash at the very end escapes the end of the string, and
		// pgx drops it; before an appended key it would escape the space.
		if n := len(raw) - len(strings.TrimRight(raw, `\`)); n%2 == 1 {
			base = raw[:len(raw)-1]
		}
		seps, join, quote = []string{" ", "'' "}, " ", quoteKV
	}
	if base == "" {
		seps = []string{""}
	}
	list := make([]string, len(pairs))
	for i, kv := range pairs {
		list[i] = kv.key + "=" + quote(kv.value)
	}
	tail := strings.Join(list, join)
	for _, sep := range seps {
		s := base + sep + tail
		cc, err := pgx.ParseConfig(s)
		if err == nil && !slices.ContainsFunc(pairs, func(kv kvPair) bool {
			v, ok := cc.RuntimeParams[kv.key]
			return !ok || v != kv.value
		}) {
			return s
		}
	}
	return ""
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
		src.MaxLag = defaultMaxLag(c.ProbeInterval)                       // it follows the probe interval
		src.CircuitMaxBackoff = defaultCircuitMaxBackoff(c.ProbeInterval) // so does it
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

// kvSpace is the whitespace of keyword/value syntax.
const kvSpace = " \t\n\r\v\f"

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
