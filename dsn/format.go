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
// The PostgreSQL part is the connection string cfg was parsed from, less its
// pgrouted_ keys, in its own form. When cfg was built in code, or its Hosts
// no longer are the parsed ones, that part is written from the hosts'
// ConnConfigs as keyword/value: host, port, dbname, user, password,
// sslmode (as the TLS configurations show it), connect_timeout and the
// other settings pgx keeps, and runtime parameters. TLS material that came
// from files (sslrootcert, sslcert, sslkey) cannot be recovered there and is
// left out. Changes made in code to a parsed host's ConnConfig are not
// seen.
//
// Then come the routing keys whose value differs from its default, in a
// fixed order: the order of the table in [Parse].
func Format(cfg *Config) string {
	if cfg == nil {
		return ""
	}
	return format(cfg, false)
}

func format(c *Config, redact bool) string {
	var b strings.Builder
	f := formKV
	hasQuery := false
	if c.src != nil && c.hostsUnchanged() {
		b.WriteString(c.src.String(redact))
		f = c.src.form
		hasQuery = len(c.src.query) > 0
	} else {
		b.WriteString(synthesize(c.Hosts, redact))
	}
	for _, kv := range routingPairs(c) {
		switch {
		case f == formURL && hasQuery:
			b.WriteByte('&')
		case f == formURL:
			b.WriteByte('?')
			hasQuery = true
		case b.Len() > 0:
			b.WriteByte(' ')
		}
		b.WriteString(kv.key)
		b.WriteByte('=')
		if f == formURL {
			b.WriteString(encodeURL(kv.value))
		} else {
			b.WriteString(quoteKV(kv.value))
		}
	}
	return b.String()
}

// hostsUnchanged reports whether c's hosts are still the ones its source
// string names.
func (c *Config) hostsUnchanged() bool {
	if len(c.Hosts) != len(c.src.addrs) {
		return false
	}
	for i, h := range c.Hosts {
		if h.Addr != c.src.addrs[i] {
			return false
		}
	}
	return true
}

// routingPairs returns the routing keys of c that differ from their
// defaults, in table order.
func routingPairs(c *Config) []kvPair {
	def := defaultConfig()
	var out []kvPair
	for _, s := range specs {
		switch s.key {
		case keyNames:
			if slices.ContainsFunc(c.Hosts, func(h Host) bool { return h.Name != h.Addr }) {
				out = append(out, kvPair{s.key, joinHosts(c.Hosts, func(h Host) string { return h.Name })})
			}
		case keyWeights:
			if slices.ContainsFunc(c.Hosts, func(h Host) bool { return h.Weight != DefaultWeight }) {
				out = append(out, kvPair{s.key, joinHosts(c.Hosts, func(h Host) string { return strconv.Itoa(h.Weight) })})
			}
		default:
			if v := s.get(c); v != s.get(def) {
				out = append(out, kvPair{s.key, v})
			}
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

// synthesize writes the PostgreSQL part of a connection string for hosts
// from their ConnConfigs. Settings other than host and port are the first
// host's: a connection string gives all hosts the same.
func synthesize(hosts []Host, redact bool) string {
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
	return (&source{form: formKV, pairs: kv}).String(redact)
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
