package dsn

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// marker is the password of the table's DSNs: it must never show in an
// error, in String or in Redacted. It holds no byte special to either form.
const marker = "Mk7-s3cr3t-Q9"

// pgEnv is every environment variable pgx reads.
var pgEnv = []string{
	"PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGPASSFILE", "PGAPPNAME",
	"PGCONNECT_TIMEOUT", "PGSSLMODE", "PGSSLKEY", "PGSSLCERT", "PGSSLCERTMODE", "PGSSLSNI",
	"PGSSLROOTCERT", "PGSSLPASSWORD", "PGSSLNEGOTIATION", "PGTARGETSESSIONATTRS", "PGSERVICE",
	"PGSERVICEFILE", "PGTZ", "PGOPTIONS", "PGMINPROTOCOLVERSION", "PGMAXPROTOCOLVERSION",
	"PGCHANNELBINDING", "PGREQUIREAUTH",
}

// isolateEnv unsets every PG* variable and points HOME at an empty directory
// (no ~/.pgpass, no ~/.pg_service.conf, no client certificates), restoring
// all of it when tb ends; then it sets env.
func isolateEnv(tb testing.TB, env map[string]string) {
	tb.Helper()
	for _, k := range pgEnv {
		tb.Setenv(k, "") // registers the restore
		os.Unsetenv(k)
	}
	tb.Setenv("HOME", tb.TempDir())
	tb.Setenv("USER", "osuser") // pgx's default user, whatever the machine's
	for k, v := range env {
		tb.Setenv(k, v)
	}
}

// hostWant is what a parsed host must be.
type hostWant struct {
	name, addr string
	weight     int
	tls        bool // ConnConfig.TLSConfig != nil
	fallbacks  int  // len(ConnConfig.Fallbacks)
}

// plain returns hostWants for hosts without TLS and default names and
// weights.
func plain(addrs ...string) []hostWant {
	hs := make([]hostWant, len(addrs))
	for i, a := range addrs {
		hs[i] = hostWant{name: a, addr: a, weight: 1}
	}
	return hs
}

// prefer returns hostWants for hosts under sslmode=prefer: TLS, then a plain
// fallback.
func prefer(addrs ...string) []hostWant {
	hs := plain(addrs...)
	for i := range hs {
		hs[i].tls, hs[i].fallbacks = true, 1
	}
	return hs
}

// dsnCase is one row of the table that drives TestParse, TestRoundTrip and
// FuzzParse.
type dsnCase struct {
	name string
	dsn  string
	env  map[string]string

	// For a DSN that parses:
	hosts []hostWant                // the hosts, in order
	set   func(*Config)             // the routing settings that differ from the defaults
	check func(*testing.T, *Config) // anything else

	// For a DSN that does not: a part of the message, and the key it names
	// ("" when pgx rejects it without naming one).
	err, key string
}

var cases = []dsnCase{
	// Both forms, hosts and ports.
	{name: "url one host", dsn: "postgres://app:" + marker + "@db1:5432/app?sslmode=disable",
		hosts: plain("db1:5432"),
		check: func(t *testing.T, c *Config) {
			cc := c.Hosts[0].ConnConfig
			if cc.User != "app" || cc.Password != marker || cc.Database != "app" {
				t.Errorf("user %q password %q database %q", cc.User, cc.Password, cc.Database)
			}
		}},
	{name: "url per-host ports", dsn: "postgresql://app:" + marker + "@db1:5432,db2:5433,db3:5434/app?sslmode=require",
		hosts: []hostWant{
			{name: "db1:5432", addr: "db1:5432", weight: 1, tls: true},
			{name: "db2:5433", addr: "db2:5433", weight: 1, tls: true},
			{name: "db3:5434", addr: "db3:5434", weight: 1, tls: true},
		}},
	{name: "url default ports", dsn: "postgres://db1,db2:6543/app?sslmode=disable",
		hosts: plain("db1:5432", "db2:6543")},
	{name: "url shared port in query", dsn: "postgres://db1,db2/app?port=6432&sslmode=disable",
		hosts: plain("db1:6432", "db2:6432")},
	{name: "kv per-host ports", dsn: "host=db1,db2 port=5432,5433 user=app password=" + marker + " dbname=app sslmode=disable",
		hosts: plain("db1:5432", "db2:5433"),
		check: func(t *testing.T, c *Config) {
			for _, h := range c.Hosts {
				if h.ConnConfig.Password != marker || h.ConnConfig.User != "app" {
					t.Errorf("%s: user %q password %q", h.Name, h.ConnConfig.User, h.ConnConfig.Password)
				}
			}
		}},
	{name: "kv shared port", dsn: "host=db1,db2,db3 port=6000 sslmode=disable",
		hosts: plain("db1:6000", "db2:6000", "db3:6000")},
	{name: "kv quoted values", dsn: `host = 'db1,db2' password = '` + marker + ` \'q\' \\' sslmode=disable application_name='my app'`,
		hosts: plain("db1:5432", "db2:5432"),
		check: func(t *testing.T, c *Config) {
			cc := c.Hosts[1].ConnConfig
			if cc.Password != marker+` 'q' \` || cc.RuntimeParams["application_name"] != "my app" {
				t.Errorf("password %q application_name %q", cc.Password, cc.RuntimeParams["application_name"])
			}
		}},

	// IPv6.
	{name: "url ipv6", dsn: "postgres://u:" + marker + "@[::1]:5434,[2001:db8::2]/db?sslmode=disable",
		hosts: plain("[::1]:5434", "[2001:db8::2]:5432"),
		check: func(t *testing.T, c *Config) {
			if h := c.Hosts[0].ConnConfig.Host; h != "::1" {
				t.Errorf("pgx host %q, want ::1", h)
			}
		}},
	{name: "kv ipv6 with zone", dsn: "host=::1,fe80::1%eth0 port=5432,5433 sslmode=disable",
		hosts: plain("[::1]:5432", "[fe80::1%eth0]:5433")},
	{name: "url ipv6 verify-full", dsn: "postgres://[2001:db8::7],db2/app?sslmode=verify-full",
		hosts: []hostWant{
			{name: "[2001:db8::7]:5432", addr: "[2001:db8::7]:5432", weight: 1, tls: true},
			{name: "db2:5432", addr: "db2:5432", weight: 1, tls: true},
		},
		check: func(t *testing.T, c *Config) {
			for i, want := range []string{"2001:db8::7", "db2"} {
				if got := c.Hosts[i].ConnConfig.TLSConfig.ServerName; got != want {
					t.Errorf("host %d: ServerName %q, want %q", i, got, want)
				}
			}
		}},

	// Unix sockets.
	{name: "kv unix socket directories", dsn: "host=/var/run/postgresql,/tmp/ port=5432,5433",
		hosts: plain("/var/run/postgresql/.s.PGSQL.5432", "/tmp/.s.PGSQL.5433")},
	{name: "url unix socket percent-encoded", dsn: "postgres://%2Fvar%2Frun%2Fpostgresql/app",
		hosts: plain("/var/run/postgresql/.s.PGSQL.5432")},
	{name: "url unix socket and tcp in query", dsn: "postgres:///app?host=/tmp,db2&sslmode=prefer",
		hosts: []hostWant{
			{name: "/tmp/.s.PGSQL.5432", addr: "/tmp/.s.PGSQL.5432", weight: 1},
			{name: "db2:5432", addr: "db2:5432", weight: 1, tls: true, fallbacks: 1},
		}},

	// TLS modes: each host keeps its own pair of attempts.
	{name: "sslmode prefer by default", dsn: "postgres://db1,db2,db3/app",
		hosts: prefer("db1:5432", "db2:5432", "db3:5432"),
		check: func(t *testing.T, c *Config) {
			for _, h := range c.Hosts {
				cc := h.ConnConfig
				if fb := cc.Fallbacks[0]; fb.Host != cc.Host || fb.Port != cc.Port || fb.TLSConfig != nil {
					t.Errorf("%s: fallback %+v", h.Name, fb)
				}
				if cc.TLSConfig.ServerName != cc.Host {
					t.Errorf("%s: SNI %q", h.Name, cc.TLSConfig.ServerName)
				}
			}
		}},
	{name: "sslmode allow", dsn: "host=db1,db2 sslmode=allow",
		hosts: []hostWant{
			{name: "db1:5432", addr: "db1:5432", weight: 1, fallbacks: 1},
			{name: "db2:5432", addr: "db2:5432", weight: 1, fallbacks: 1},
		}},

	// Percent-encoding.
	{name: "url percent-encoding", dsn: "postgres://us%40r:" + marker + "%40%2F%3A@db1/my%20db?application_name=a%20b&sslmode=disable&pgrouted_names=db%2Done",
		hosts: []hostWant{{name: "db-one", addr: "db1:5432", weight: 1}},
		check: func(t *testing.T, c *Config) {
			cc := c.Hosts[0].ConnConfig
			if cc.User != "us@r" || cc.Password != marker+"@/:" || cc.Database != "my db" || cc.RuntimeParams["application_name"] != "a b" {
				t.Errorf("user %q password %q database %q runtime %v", cc.User, cc.Password, cc.Database, cc.RuntimeParams)
			}
		}},
	{name: "url percent-encoded routing key", dsn: "postgres://db1/app?sslmode=disable&pgrouted%5Fselect=random&pgrouted_max_lag=%202s%20",
		hosts: plain("db1:5432"),
		set:   func(c *Config) { c.SelectPolicy = SelectRandom; c.MaxLag = LagTime(2 * time.Second) }},
	{name: "url password in query", dsn: "postgres://u@db1/app?password=" + marker + "&sslpassword=" + marker + "2&sslmode=disable",
		hosts: plain("db1:5432")},

	// Environment fallbacks.
	{name: "env fallbacks", dsn: "pgrouted_select=random",
		env: map[string]string{"PGHOST": "e1,e2", "PGPORT": "5433", "PGUSER": "envuser", "PGPASSWORD": marker,
			"PGDATABASE": "envdb", "PGSSLMODE": "disable", "PGAPPNAME": "envapp"},
		hosts: plain("e1:5433", "e2:5433"),
		set:   func(c *Config) { c.SelectPolicy = SelectRandom },
		check: func(t *testing.T, c *Config) {
			cc := c.Hosts[1].ConnConfig
			if cc.User != "envuser" || cc.Password != marker || cc.Database != "envdb" || cc.RuntimeParams["application_name"] != "envapp" {
				t.Errorf("user %q password %q database %q runtime %v", cc.User, cc.Password, cc.Database, cc.RuntimeParams)
			}
		}},
	{name: "env under url", dsn: "postgres://db9/app?pgrouted_fallback=error",
		env:   map[string]string{"PGHOST": "e1,e2", "PGSSLMODE": "disable", "PGUSER": "envuser"},
		hosts: plain("db9:5432"),
		set:   func(c *Config) { c.Fallback = FallbackError },
		check: func(t *testing.T, c *Config) {
			if u := c.Hosts[0].ConnConfig.User; u != "envuser" {
				t.Errorf("user %q", u)
			}
		}},
	{name: "empty dsn from env", dsn: "",
		env:   map[string]string{"PGHOST": "e1", "PGSSLMODE": "require"},
		hosts: []hostWant{{name: "e1:5432", addr: "e1:5432", weight: 1, tls: true}}},

	// Runtime parameters and other pgx settings reach every host.
	{name: "runtime params", dsn: "host=db1,db2 application_name=web search_path=app,public connect_timeout=5 sslmode=disable pgrouted_consistency=eventual",
		hosts: plain("db1:5432", "db2:5432"),
		set:   func(c *Config) { c.Consistency = ConsistencyEventual },
		check: func(t *testing.T, c *Config) {
			for _, h := range c.Hosts {
				cc := h.ConnConfig
				want := map[string]string{"application_name": "web", "search_path": "app,public"}
				if !maps.Equal(cc.RuntimeParams, want) || cc.ConnectTimeout != 5*time.Second {
					t.Errorf("%s: runtime %v timeout %v", h.Name, cc.RuntimeParams, cc.ConnectTimeout)
				}
			}
		}},

	// Every pgrouted_ key, good values.
	{name: "consistency eventual", dsn: "host=db1 sslmode=disable pgrouted_consistency=eventual",
		hosts: plain("db1:5432"), set: func(c *Config) { c.Consistency = ConsistencyEventual }},
	{name: "consistency session", dsn: "host=db1 sslmode=disable pgrouted_consistency=session",
		hosts: plain("db1:5432")},
	{name: "consistency global", dsn: "host=db1 sslmode=disable pgrouted_consistency=global",
		hosts: plain("db1:5432"), set: func(c *Config) { c.Consistency = ConsistencyGlobal }},
	{name: "consistency causal", dsn: "host=db1 sslmode=disable pgrouted_consistency=causal",
		hosts: plain("db1:5432"), set: func(c *Config) { c.Consistency = ConsistencyCausal }},
	{name: "max_lag duration", dsn: "host=db1 sslmode=disable pgrouted_max_lag=2s",
		hosts: plain("db1:5432"), set: func(c *Config) { c.MaxLag = LagTime(2 * time.Second) }},
	{name: "max_lag fraction", dsn: "host=db1 sslmode=disable pgrouted_max_lag=1.5s",
		hosts: plain("db1:5432"), set: func(c *Config) { c.MaxLag = LagTime(1500 * time.Millisecond) }},
	{name: "max_lag minutes", dsn: "host=db1 sslmode=disable pgrouted_max_lag=1m",
		hosts: plain("db1:5432"), set: func(c *Config) { c.MaxLag = LagTime(time.Minute) }},
	{name: "max_lag trimmed", dsn: "host=db1 sslmode=disable pgrouted_max_lag=' 1750 ms '",
		hosts: plain("db1:5432"), set: func(c *Config) { c.MaxLag = LagTime(1750 * time.Millisecond) }},
	{name: "max_lag bytes", dsn: "host=db1 sslmode=disable pgrouted_max_lag=4096B",
		hosts: plain("db1:5432"), set: func(c *Config) { c.MaxLag = LagBytes(4096) }},
	{name: "max_lag KB", dsn: "host=db1 sslmode=disable pgrouted_max_lag=512KB",
		hosts: plain("db1:5432"), set: func(c *Config) { c.MaxLag = LagBytes(512 << 10) }},
	{name: "max_lag MB fraction", dsn: "postgres://db1?sslmode=disable&pgrouted_max_lag=1.5MB",
		hosts: plain("db1:5432"), set: func(c *Config) { c.MaxLag = LagBytes(3 << 19) }},
	{name: "max_lag GB", dsn: "host=db1 sslmode=disable pgrouted_max_lag=1GB",
		hosts: plain("db1:5432"), set: func(c *Config) { c.MaxLag = LagBytes(1 << 30) }},
	{name: "max_lag none", dsn: "host=db1 sslmode=disable pgrouted_max_lag=none",
		hosts: plain("db1:5432"), set: func(c *Config) { c.MaxLag = LagNone() }},
	{name: "max_lag default", dsn: "host=db1 sslmode=disable pgrouted_probe_interval=10s pgrouted_lease=30s",
		hosts: plain("db1:5432"), set: func(c *Config) {
			c.ProbeInterval, c.Lease = 10*time.Second, 30*time.Second
			c.MaxLag = LagTime(DefaultMaxLag)
		}},
	{name: "max_lag default follows a long probe interval", dsn: "host=db1 sslmode=disable pgrouted_probe_interval=20s pgrouted_lease=1m",
		hosts: plain("db1:5432"), set: func(c *Config) {
			c.ProbeInterval, c.Lease = 20*time.Second, time.Minute
			c.MaxLag = LagTime(time.Minute) // three probe intervals, not 30s
		}},
	{name: "max_lag zero", dsn: "host=db1 sslmode=disable pgrouted_max_lag=0",
		err: "pgrouted_max_lag (0) must be greater than 0", key: keyMaxLag},
	{name: "probe_interval", dsn: "host=db1 sslmode=disable pgrouted_probe_interval=250ms pgrouted_max_lag=500ms",
		hosts: plain("db1:5432"),
		set: func(c *Config) {
			c.ProbeInterval = 250 * time.Millisecond
			c.MaxLag = LagTime(500 * time.Millisecond)
		}},
	{name: "select weighted", dsn: "host=db1,db2,db3 sslmode=disable pgrouted_select=weighted pgrouted_weights=1,2,3",
		hosts: []hostWant{
			{name: "db1:5432", addr: "db1:5432", weight: 1},
			{name: "db2:5432", addr: "db2:5432", weight: 2},
			{name: "db3:5432", addr: "db3:5432", weight: 3},
		},
		set: func(c *Config) { c.SelectPolicy = SelectWeighted }},
	{name: "select least-inflight", dsn: "host=db1 sslmode=disable pgrouted_select=least-inflight",
		hosts: plain("db1:5432"), set: func(c *Config) { c.SelectPolicy = SelectLeastInflight }},
	{name: "select nearest", dsn: "host=db1 sslmode=disable pgrouted_select=nearest",
		hosts: plain("db1:5432"), set: func(c *Config) { c.SelectPolicy = SelectNearest }},
	{name: "select round-robin", dsn: "host=db1 sslmode=disable pgrouted_select=round-robin",
		hosts: plain("db1:5432")},
	{name: "select repeated, last wins", dsn: "postgres://db1?sslmode=disable&pgrouted_select=bogus&pgrouted_select=random",
		hosts: plain("db1:5432"), set: func(c *Config) { c.SelectPolicy = SelectRandom }},
	{name: "latency_window off", dsn: "host=db1 sslmode=disable pgrouted_latency_window=off",
		hosts: plain("db1:5432"), set: func(c *Config) { c.LatencyWindow = LatencyWindowOff }},
	{name: "latency_window zero", dsn: "host=db1 sslmode=disable pgrouted_latency_window=0",
		err: "pgrouted_latency_window (0) must be greater than 0 (off turns the window off)", key: keyLatencyWindow},
	{name: "latency_window sub-ms", dsn: "host=db1 sslmode=disable pgrouted_latency_window=0.25ms",
		hosts: plain("db1:5432"), set: func(c *Config) { c.LatencyWindow = 250 * time.Microsecond }},
	{name: "names trimmed", dsn: "postgres://db1,db2/app?sslmode=disable&pgrouted_names=east%20,%20west",
		hosts: []hostWant{{name: "east", addr: "db1:5432", weight: 1}, {name: "west", addr: "db2:5432", weight: 1}}},
	{name: "names percent-encoded", dsn: "postgres://db1,db2/app?sslmode=disable&pgrouted_names=r%C3%A9gion%201,x%26y%3D%25",
		hosts: []hostWant{{name: "région 1", addr: "db1:5432", weight: 1}, {name: "x&y=%", addr: "db2:5432", weight: 1}}},
	{name: "names with spaces inside", dsn: "host=db1,db2 sslmode=disable pgrouted_names='rack a,rack b'",
		hosts: []hostWant{{name: "rack a", addr: "db1:5432", weight: 1}, {name: "rack b", addr: "db2:5432", weight: 1}}},
	{name: "fallback error", dsn: "host=db1 sslmode=disable pgrouted_fallback=error",
		hosts: plain("db1:5432"), set: func(c *Config) { c.Fallback = FallbackError }},
	{name: "readonly_tx primary", dsn: "host=db1 sslmode=disable pgrouted_readonly_tx=primary",
		hosts: plain("db1:5432"), set: func(c *Config) { c.ReadOnlyTx = ReadOnlyTxPrimary }},
	{name: "pin_after_write", dsn: "host=db1 sslmode=disable pgrouted_pin_after_write=1.5s",
		hosts: plain("db1:5432"), set: func(c *Config) { c.PinAfterWrite = 1500 * time.Millisecond }},
	{name: "replica_wait", dsn: "host=db1 sslmode=disable pgrouted_replica_wait=10ms",
		hosts: plain("db1:5432"), set: func(c *Config) { c.ReplicaWait = 10 * time.Millisecond }},
	{name: "primary_read_limit", dsn: "host=db1 sslmode=disable pgrouted_primary_read_limit=8",
		hosts: plain("db1:5432"), set: func(c *Config) { c.PrimaryReadLimit = 8 }},
	{name: "primary_read_limit at its maximum", dsn: "host=db1 sslmode=disable pgrouted_primary_read_limit=10000",
		hosts: plain("db1:5432"), set: func(c *Config) { c.PrimaryReadLimit = 10000 }},
	{name: "write_timeout zero", dsn: "host=db1 sslmode=disable pgrouted_write_timeout=0s",
		hosts: plain("db1:5432"), set: func(c *Config) { c.WriteTimeout = WriteNoWait }},
	{name: "lease", dsn: "host=db1 sslmode=disable pgrouted_lease=2m",
		hosts: plain("db1:5432"), set: func(c *Config) { c.Lease = 2 * time.Minute }},
	{name: "replica_max_conns", dsn: "host=db1 sslmode=disable pgrouted_replica_max_conns=8",
		hosts: plain("db1:5432"), set: func(c *Config) { c.ReplicaMaxConns = 8 }},
	{name: "circuit keys", dsn: "host=db1 sslmode=disable pgrouted_circuit_failures=5 pgrouted_circuit_max_backoff=1m",
		hosts: plain("db1:5432"),
		set:   func(c *Config) { c.CircuitFailures = 5; c.CircuitMaxBackoff = time.Minute }},
	{name: "strict_boot true", dsn: "host=db1 sslmode=disable pgrouted_strict_boot=true",
		hosts: plain("db1:5432"), set: func(c *Config) { c.StrictBoot = true }},
	{name: "strict_boot on", dsn: "host=db1 sslmode=disable pgrouted_strict_boot=ON",
		hosts: plain("db1:5432"), set: func(c *Config) { c.StrictBoot = true }},
	{name: "strict_boot false", dsn: "host=db1 sslmode=disable pgrouted_strict_boot=0",
		hosts: plain("db1:5432")},
	{name: "function lists", dsn: `host=db1 sslmode=disable pgrouted_read_functions='jitter, app.roll' pgrouted_write_functions=app."Audit"`,
		hosts: plain("db1:5432"), set: func(c *Config) {
			c.ReadFunctions = []string{"jitter", "app.roll"}
			c.WriteFunctions = []string{`app."Audit"`}
		}},
	{name: "function lists in a URL", dsn: "postgres://db1/app?sslmode=disable&pgrouted_write_functions=audit,app.log",
		hosts: plain("db1:5432"), set: func(c *Config) { c.WriteFunctions = []string{"audit", "app.log"} }},
	{name: "empty function list", dsn: "host=db1 sslmode=disable pgrouted_read_functions=''",
		hosts: plain("db1:5432")},
	{name: "every key at once", dsn: "postgres://app:" + marker + "@db1:5432,db2:5433,[::1]:5434/app?sslmode=disable" +
		"&pgrouted_consistency=eventual&pgrouted_max_lag=16MB&pgrouted_probe_interval=0.5s&pgrouted_select=nearest" +
		"&pgrouted_latency_window=5ms&pgrouted_weights=3,2,1&pgrouted_names=a,b,c&pgrouted_fallback=error" +
		"&pgrouted_readonly_tx=primary&pgrouted_pin_after_write=100ms&pgrouted_write_timeout=10s&pgrouted_lease=5s" +
		"&pgrouted_replica_max_conns=20&pgrouted_circuit_failures=3&pgrouted_circuit_max_backoff=2m&pgrouted_strict_boot=yes" +
		"&pgrouted_topology=patroni&pgrouted_patroni_endpoints=http://db1:8008,https://db2:8008&pgrouted_patroni_timeout=1s&pgrouted_discover=true&pgrouted_discover_max=32" +
		"&pgrouted_replica_min_conns=2&pgrouted_replica_min_idle_conns=1&pgrouted_replica_max_conn_lifetime=2h&pgrouted_replica_max_conn_lifetime_jitter=5m" +
		"&pgrouted_replica_max_conn_idle_time=10m&pgrouted_replica_health_check_period=30s" +
		"&pool_max_conns=8&pool_min_conns=2&pool_min_idle_conns=1&pool_max_conn_lifetime=1h&pool_max_conn_lifetime_jitter=1m" +
		"&pool_max_conn_idle_time=5m&pool_health_check_period=10s",
		hosts: []hostWant{
			{name: "a", addr: "db1:5432", weight: 3},
			{name: "b", addr: "db2:5433", weight: 2},
			{name: "c", addr: "[::1]:5434", weight: 1},
		},
		set: func(c *Config) {
			*c = Config{Consistency: ConsistencyEventual, MaxLag: LagBytes(16 << 20), ProbeInterval: 500 * time.Millisecond,
				SelectPolicy: SelectNearest, LatencyWindow: 5 * time.Millisecond, Fallback: FallbackError, ReadOnlyTx: ReadOnlyTxPrimary,
				PinAfterWrite: 100 * time.Millisecond, WriteTimeout: 10 * time.Second, Lease: 5 * time.Second,
				ReplicaMaxConns: 20, CircuitFailures: 3, CircuitMaxBackoff: 2 * time.Minute, StrictBoot: true}
			c.Topology, c.PatroniEndpoints, c.PatroniTimeout, c.Discover = TopologyPatroni, []string{"http://db1:8008", "https://db2:8008"}, time.Second, true
			c.DiscoverMax = 32
			c.ReplicaMinConns, c.ReplicaMinIdleConns, c.ReplicaMaxConnLifetime = 2, 1, 2*time.Hour
			c.ReplicaMaxConnLifetimeJitter, c.ReplicaMaxConnIdleTime, c.ReplicaHealthCheckPeriod = 5*time.Minute, 10*time.Minute, 30*time.Second
			c.PrimaryMaxConns, c.PrimaryMinConns, c.PrimaryMinIdleConns, c.PrimaryMaxConnLifetime = 8, 2, 1, time.Hour
			c.PrimaryMaxConnLifetimeJitter, c.PrimaryMaxConnIdleTime, c.PrimaryHealthCheckPeriod = time.Minute, 5*time.Minute, 10*time.Second
		}},

	// Unknown keys.
	{name: "unknown key", dsn: "host=db1 pgrouted_max_lga=2s password=" + marker,
		err: "unknown key pgrouted_max_lga (did you mean pgrouted_max_lag?)", key: "pgrouted_max_lga"},
	{name: "unknown key in url", dsn: "postgres://u:" + marker + "@db1/app?pgrouted_probe=1s",
		err: "unknown key pgrouted_probe (did you mean pgrouted_probe_interval?)", key: "pgrouted_probe"},
	{name: "unknown key upper case", dsn: "host=db1 PGROUTED_SELECT=random",
		err: "unknown key PGROUTED_SELECT (did you mean pgrouted_select?)", key: "PGROUTED_SELECT"},
	{name: "unknown key prefix only", dsn: "host=db1 pgrouted_=1",
		err: "unknown key pgrouted_ (did you mean pgrouted_names?)", key: "pgrouted_"},
	{name: "unknown key weight singular", dsn: "host=db1 pgrouted_weight=1",
		err: "unknown key pgrouted_weight (did you mean pgrouted_weights?)", key: "pgrouted_weight"},

	// Bad values, key by key.
	{name: "bad consistency", dsn: "host=db1 pgrouted_consistency=strong",
		err: "pgrouted_consistency (strong) must be one of session, eventual, causal, global", key: keyConsistency},
	{name: "bad max_lag unit", dsn: "host=db1 pgrouted_max_lag=10XB",
		err: "pgrouted_max_lag (10XB) is not a duration", key: keyMaxLag},
	{name: "bad max_lag days", dsn: "host=db1 pgrouted_max_lag=1d",
		err: "pgrouted_max_lag (1d) is not a duration", key: keyMaxLag},
	{name: "bad max_lag negative", dsn: "host=db1 pgrouted_max_lag=-2s",
		err: "pgrouted_max_lag (-2s) must not be negative", key: keyMaxLag},
	{name: "bad max_lag negative", dsn: "host=db1 pgrouted_max_lag=-1MB",
		err: "pgrouted_max_lag (-1MB) is not a duration", key: keyMaxLag},
	{name: "bad max_lag zero bytes", dsn: "host=db1 pgrouted_max_lag=0B",
		err: "pgrouted_max_lag (0B) must be greater than 0", key: keyMaxLag},
	{name: "bad max_lag not above probe_interval", dsn: "host=db1 pgrouted_max_lag=1s",
		err: "pgrouted_max_lag (1s) must be greater than pgrouted_probe_interval (1s)", key: keyMaxLag},
	{name: "bad max_lag below probe_interval", dsn: "postgres://db1?pgrouted_probe_interval=3s&pgrouted_max_lag=2s",
		err: "pgrouted_max_lag (2s) must be greater than pgrouted_probe_interval (3s)", key: keyMaxLag},
	{name: "bad max_lag overflow", dsn: "host=db1 pgrouted_max_lag=99999999999999999999m",
		err: "pgrouted_max_lag (99999999999999999999m) is not a duration", key: keyMaxLag},
	{name: "bad max_lag without a unit", dsn: "host=db1 password=" + marker + " pgrouted_max_lag=500",
		err: "pgrouted_max_lag (500) has no unit: add one, e.g. 500ms (a time) or 500KB (WAL bytes)", key: keyMaxLag},
	{name: "bad max_lag fraction without a unit", dsn: "postgres://db1?pgrouted_max_lag=%202.5%20",
		err: "pgrouted_max_lag ( 2.5 ) has no unit: add one, e.g. 2.5ms (a time) or 2.5KB (WAL bytes)", key: keyMaxLag},
	{name: "bad probe_interval without a unit", dsn: "host=db1 pgrouted_probe_interval=250",
		err: "pgrouted_probe_interval (250) has no unit: add one, e.g. 250ms", key: keyProbeInterval},
	{name: "bad latency_window without a unit", dsn: "host=db1 pgrouted_latency_window=5",
		err: "pgrouted_latency_window (5) has no unit: add one, e.g. 5ms, or off", key: keyLatencyWindow},
	{name: "bad replica_wait without a unit", dsn: "host=db1 pgrouted_replica_wait=10",
		err: "pgrouted_replica_wait (10) has no unit: add one, e.g. 10ms", key: keyReplicaWait},
	{name: "bad probe_interval zero", dsn: "host=db1 pgrouted_probe_interval=0",
		err: "pgrouted_probe_interval (0) must be greater than 0", key: keyProbeInterval},
	{name: "bad probe_interval syntax", dsn: "host=db1 pgrouted_probe_interval=1s500",
		err: "pgrouted_probe_interval (1s500) is not a duration", key: keyProbeInterval},
	{name: "bad probe_interval spaced parts", dsn: "host=db1 pgrouted_probe_interval='1s 500ms'",
		err: "pgrouted_probe_interval (1s 500ms) is not a duration", key: keyProbeInterval},
	{name: "bad probe_interval day", dsn: "host=db1 pgrouted_probe_interval=1d",
		err: "pgrouted_probe_interval (1d) is not a duration: use numbers with a unit of ns, us, ms, s, m or h", key: keyProbeInterval},
	{name: "bad probe_interval empty", dsn: "host=db1 pgrouted_probe_interval=",
		err: "pgrouted_probe_interval () is not a duration", key: keyProbeInterval},
	{name: "bad select", dsn: "host=db1 pgrouted_select=fastest",
		err: "pgrouted_select (fastest) must be one of round-robin, weighted, least-inflight, nearest, random", key: keySelect},
	{name: "bad latency_window", dsn: "host=db1 pgrouted_latency_window=fast",
		err: "pgrouted_latency_window (fast) is not a duration", key: keyLatencyWindow},
	{name: "bad fallback", dsn: "host=db1 pgrouted_fallback=replica",
		err: "pgrouted_fallback (replica) must be one of primary, error", key: keyFallback},
	{name: "bad readonly_tx", dsn: "host=db1 pgrouted_readonly_tx=any",
		err: "pgrouted_readonly_tx (any) must be one of replica, primary", key: keyReadOnlyTx},
	{name: "bad pin_after_write", dsn: "host=db1 pgrouted_pin_after_write=-5ms",
		err: "pgrouted_pin_after_write (-5ms) must not be negative", key: keyPinAfterWrite},
	{name: "bad write_timeout negative", dsn: "host=db1 pgrouted_write_timeout=-1ns",
		err: "pgrouted_write_timeout (-1ns) must not be negative", key: keyWriteTimeout},
	{name: "bad latency_window negative", dsn: "host=db1 pgrouted_latency_window=-1ms",
		err: "pgrouted_latency_window (-1ms) must not be negative (off turns the window off)", key: keyLatencyWindow},
	{name: "bad write_timeout", dsn: "host=db1 pgrouted_write_timeout=1x",
		err: "pgrouted_write_timeout (1x) is not a duration", key: keyWriteTimeout},
	{name: "bad lease zero", dsn: "host=db1 pgrouted_lease=0s",
		err: "pgrouted_lease (0s) must be greater than 0", key: keyLease},
	{name: "bad lease not above probe_interval", dsn: "host=db1 pgrouted_lease=1s",
		err: "pgrouted_lease (1s) must be greater than pgrouted_probe_interval (1s)", key: keyLease},
	{name: "bad replica_max_conns zero", dsn: "host=db1 pgrouted_replica_max_conns=0",
		err: "pgrouted_replica_max_conns (0) must be a whole number from 1", key: keyReplicaMaxConns},
	{name: "bad replica_max_conns word", dsn: "host=db1 pgrouted_replica_max_conns=many",
		err: "pgrouted_replica_max_conns (many) must be a whole number", key: keyReplicaMaxConns},
	{name: "bad circuit_failures", dsn: "host=db1 pgrouted_circuit_failures=0",
		err: "pgrouted_circuit_failures (0) must be at least 1", key: keyCircuitFailures},
	{name: "bad circuit_failures word", dsn: "host=db1 pgrouted_circuit_failures=x",
		err: "pgrouted_circuit_failures (x) must be a whole number", key: keyCircuitFailures},
	{name: "bad circuit_max_backoff", dsn: "host=db1 pgrouted_circuit_max_backoff=0ms",
		err: "pgrouted_circuit_max_backoff (0ms) must be greater than 0", key: keyCircuitMaxBackoff},
	{name: "bad strict_boot", dsn: "host=db1 pgrouted_strict_boot=maybe",
		err: "pgrouted_strict_boot (maybe) must be true or false", key: keyStrictBoot},
	{name: "empty function entry", dsn: "host=db1 pgrouted_read_functions=a,,b",
		err: "pgrouted_read_functions (a,,b) entry 2 is empty", key: keyReadFunctions},

	// Weights and names.
	{name: "weights count", dsn: "host=db1,db2,db3 pgrouted_weights=1,2",
		err: "pgrouted_weights (1,2) has 2 entries for 3 hosts", key: keyWeights},
	{name: "weights zero", dsn: "host=db1,db2 pgrouted_weights=1,0",
		err: "pgrouted_weights (1,0): entry 2 (0) must be a whole number from 1 to 1000000", key: keyWeights},
	{name: "weights negative", dsn: "host=db1,db2 pgrouted_weights=-1,1",
		err: "pgrouted_weights (-1,1): entry 1 (-1) must be a whole number", key: keyWeights},
	{name: "weights too large", dsn: "host=db1 pgrouted_weights=1000001",
		err: "entry 1 (1000001) must be a whole number from 1 to 1000000", key: keyWeights},
	{name: "weights fraction", dsn: "host=db1,db2 pgrouted_weights=1.5,1",
		err: "entry 1 (1.5) must be a whole number", key: keyWeights},
	{name: "names count", dsn: "postgres://db1,db2/app?pgrouted_names=a,b,c",
		err: "pgrouted_names (a,b,c) has 3 entries for 2 hosts", key: keyNames},
	{name: "names empty entry", dsn: "host=db1,db2,db3 pgrouted_names=a,,c",
		err: "pgrouted_names (a,,c): entry 2 is empty", key: keyNames},
	{name: "names duplicate", dsn: "host=db1,db2,db3 pgrouted_names=a,b,A",
		err: "pgrouted_names (a,b,A): entries 1 and 3 are both A; names must be unique", key: keyNames},
	{name: "names reserved", dsn: "host=db1,db2 pgrouted_names=Primary,b",
		err: "pgrouted_names (Primary,b): entry 1: the name primary is reserved", key: keyNames},

	// Hosts.
	{name: "repeated host kv", dsn: "host=db1,db1 password=" + marker,
		err: "host db1:5432 is listed twice (hosts 1 and 2)", key: "host"},
	{name: "repeated host url case", dsn: "postgres://u:" + marker + "@db1:5432,db2,DB1:5432/app",
		err: "host DB1:5432 is listed twice (hosts 1 and 3)", key: "host"},
	{name: "repeated unix socket", dsn: "host=/tmp,/tmp/",
		err: "host /tmp/.s.PGSQL.5432 is listed twice", key: "host"},
	{name: "same host other port is fine", dsn: "host=db1,db1 port=5432,5433 sslmode=disable",
		hosts: plain("db1:5432", "db1:5433")},
	{name: "target_session_attrs", dsn: "host=db1,db2 target_session_attrs=read-write",
		err: "target_session_attrs (read-write) must be any or left out", key: "target_session_attrs"},
	{name: "target_session_attrs in url", dsn: "postgres://db1,db2/app?target_session_attrs=primary",
		err: "target_session_attrs (primary) must be any or left out", key: "target_session_attrs"},
	{name: "target_session_attrs from env", dsn: "host=db1,db2", env: map[string]string{"PGTARGETSESSIONATTRS": "standby"},
		err: "target_session_attrs (standby) must be any or left out", key: "target_session_attrs"},
	{name: "target_session_attrs any", dsn: "host=db1 target_session_attrs=any sslmode=disable",
		hosts: plain("db1:5432")},
	{name: "pgxpool key without pgrouted's reading", dsn: "postgres://u:" + marker + "@db1,db2/app?pool_ping_timeout=1s",
		err: "pool_ping_timeout is not a pgxpool setting pgrouted takes (it takes pool_max_conns, pool_min_conns, pool_min_idle_conns, pool_max_conn_lifetime, pool_max_conn_lifetime_jitter, pool_max_conn_idle_time, pool_health_check_period), nor a PostgreSQL one", key: "pool_ping_timeout"},
	{name: "pgxpool key unknown in keyword form", dsn: "host=db1 password=" + marker + " pool_min_conns=2 pool_max_conn_lifetime=1h pool_bogus=1",
		err: "pool_bogus is not a pgxpool setting pgrouted takes", key: "pool_bogus"},

	// pgxpool's keys, for the primary's sessions.
	{name: "primary pool keys", dsn: "postgres://u:" + marker + "@db1/app?sslmode=disable&pool_max_conns=4&pool_min_conns=2&pool_min_idle_conns=1" +
		"&pool_max_conn_lifetime=1m30s&pool_max_conn_lifetime_jitter=250ms&pool_max_conn_idle_time=1.5s&pool_health_check_period=100ms",
		hosts: plain("db1:5432"), set: func(c *Config) {
			c.PrimaryMaxConns, c.PrimaryMinConns, c.PrimaryMinIdleConns = 4, 2, 1
			c.PrimaryMaxConnLifetime, c.PrimaryMaxConnLifetimeJitter = 90*time.Second, 250*time.Millisecond
			c.PrimaryMaxConnIdleTime, c.PrimaryHealthCheckPeriod = 1500*time.Millisecond, 100*time.Millisecond
		}},
	{name: "primary pool keys keyword form at their bounds", dsn: "host=db1 sslmode=disable pool_max_conns=10000 pool_min_conns=10000 pool_min_idle_conns=0" +
		" pool_max_conn_lifetime=24h pool_max_conn_lifetime_jitter=1ms pool_max_conn_idle_time=1s pool_health_check_period=1h",
		hosts: plain("db1:5432"), set: func(c *Config) {
			c.PrimaryMaxConns, c.PrimaryMinConns = 10000, 10000
			c.PrimaryMaxConnLifetime, c.PrimaryMaxConnLifetimeJitter = 24*time.Hour, time.Millisecond
			c.PrimaryMaxConnIdleTime, c.PrimaryHealthCheckPeriod = time.Second, time.Hour
		}},
	{name: "primary pool lifetimes of 0 are none", dsn: "host=db1 sslmode=disable pool_max_conn_lifetime=0 pool_max_conn_idle_time=0s pool_min_conns=3",
		hosts: plain("db1:5432"), set: func(c *Config) { c.PrimaryMinConns = 3 }},
	{name: "bad pool_max_conns zero", dsn: "postgres://u:" + marker + "@db1/app?pool_max_conns=0",
		err: "pool_max_conns (0) must be a whole number from 1 to 10000 (leave the key out for no cap)", key: keyPrimaryMaxConns},
	{name: "bad pool_max_conns too many", dsn: "host=db1 password=" + marker + " pool_max_conns=10001",
		err: "pool_max_conns (10001) must be a whole number from 1 to 10000", key: keyPrimaryMaxConns},
	{name: "bad pool_min_conns above pool_max_conns", dsn: "postgres://u:" + marker + "@db1/app?pool_max_conns=2&pool_min_conns=3",
		err: "pool_min_conns (3) must be at most pool_max_conns (2)", key: keyPrimaryMinConns},
	{name: "bad pool_min_idle_conns above pool_max_conns", dsn: "host=db1 password=" + marker + " pool_max_conns=2 pool_min_idle_conns=5",
		err: "pool_min_idle_conns (5) must be at most pool_max_conns (2)", key: keyPrimaryMinIdleConns},
	{name: "bad pool_min_conns negative", dsn: "host=db1 pool_min_conns=-1",
		err: "pool_min_conns (-1) must be a whole number from 0 to 10000", key: keyPrimaryMinConns},
	{name: "bad pool_max_conn_lifetime below its minimum", dsn: "postgres://u:" + marker + "@db1/app?pool_max_conn_lifetime=999ms",
		err: "pool_max_conn_lifetime (999ms) must be at least 1s (or 0: none)", key: keyPrimaryMaxConnLifetime},
	{name: "bad pool_max_conn_lifetime without a unit", dsn: "host=db1 password=" + marker + " pool_max_conn_lifetime=3600",
		err: "pool_max_conn_lifetime (3600) has no unit: add one, e.g. 3600ms", key: keyPrimaryMaxConnLifetime},
	{name: "bad pool_max_conn_lifetime_jitter above its maximum", dsn: "host=db1 pool_max_conn_lifetime_jitter=25h",
		err: "pool_max_conn_lifetime_jitter (25h) must be at most 24h", key: keyPrimaryMaxConnLifetimeJitter},
	{name: "bad pool_max_conn_idle_time negative", dsn: "host=db1 pool_max_conn_idle_time=-1s",
		err: "pool_max_conn_idle_time (-1s)", key: keyPrimaryMaxConnIdleTime},
	{name: "bad pool_health_check_period below its minimum", dsn: "postgres://u:" + marker + "@db1/app?pool_health_check_period=10ms",
		err: "pool_health_check_period (10ms) must be at least 100ms", key: keyPrimaryHealthCheckPeriod},
	{name: "bad pool_health_check_period zero", dsn: "host=db1 pool_health_check_period=0",
		err: "pool_health_check_period (0) must be greater than 0", key: keyPrimaryHealthCheckPeriod},

	// pgx's own errors, with the password about.
	{name: "pgx bad port", dsn: "postgres://u:" + marker + "@db1:notaport/db", err: "invalid port"},
	{name: "pgx port count", dsn: "host=db1,db2 port=1,2,3 password=" + marker, err: "could not match 3 port numbers to 2 hosts"},
	{name: "pgx bad sslmode", dsn: "host=db1 password=" + marker + " sslmode=bogus", err: "sslmode is invalid"},
	{name: "pgx unterminated quote", dsn: "host=db1 password='" + marker, err: "unterminated quoted string"},
	{name: "pgx ipv6 bracket", dsn: "postgres://u:" + marker + "@[::1/db", err: `matching "]"`},
	{name: "pgx query without =", dsn: "postgres://u:" + marker + "@db1/db?pgrouted_select", err: `missing key/value separator`},
	{name: "pgx bad connect_timeout", dsn: "password=" + marker + " connect_timeout=soon", err: "invalid connect_timeout"},
	{name: "pgx percent-encoded password", dsn: "postgres://u:" + marker + "%21@db1:x/db", err: "invalid port"},
	{name: "pgx password in bad key", dsn: "password=" + marker + " bad key=1", err: `missing "=" after "bad"`},
	{name: "pgx slash in password", dsn: "postgres://u:" + marker + "/x@db1/db?sslmode=bogus", err: "invalid port"},
	{name: "pgx bad percent in query", dsn: "postgres://db1/db?password=" + marker + "&x=%zz", err: "invalid percent-encoded token"},

	// Topology providers.
	{name: "topology patroni kv", dsn: "host=db1,db2 sslmode=disable pgrouted_topology=patroni pgrouted_patroni_endpoints='http://db1:8008, http://db2:8008' pgrouted_patroni_timeout=500ms pgrouted_discover=true",
		hosts: plain("db1:5432", "db2:5432"),
		set: func(c *Config) {
			c.Topology, c.PatroniEndpoints, c.PatroniTimeout, c.Discover = TopologyPatroni, []string{"http://db1:8008", "http://db2:8008"}, 500*time.Millisecond, true
		}},
	{name: "topology patroni url, endpoint with a password", dsn: "postgres://app:" + marker + "@db1/app?sslmode=disable&pgrouted_topology=patroni&pgrouted_patroni_endpoints=" + "https%3A%2F%2Fpatroni%3A" + marker + "%40db1%3A8008",
		hosts: plain("db1:5432"),
		set: func(c *Config) {
			c.Topology, c.PatroniEndpoints = TopologyPatroni, []string{"https://patroni:" + marker + "@db1:8008"}
		}},
	{name: "topology probe explicit", dsn: "host=db1 sslmode=disable pgrouted_topology=probe pgrouted_discover=false",
		hosts: plain("db1:5432")},
	{name: "topology unknown", dsn: "host=db1 pgrouted_topology=consul",
		err: "pgrouted_topology (consul) must be one of probe, patroni", key: "pgrouted_topology"},
	{name: "patroni without endpoints", dsn: "host=db1 password=" + marker + " pgrouted_topology=patroni",
		err: "pgrouted_patroni_endpoints is required with pgrouted_topology=patroni", key: "pgrouted_patroni_endpoints"},
	{name: "endpoints without patroni", dsn: "host=db1 pgrouted_patroni_endpoints=http://db1:8008",
		err: "pgrouted_topology=patroni", key: "pgrouted_patroni_endpoints"},
	{name: "endpoint not http", dsn: "host=db1 pgrouted_topology=patroni pgrouted_patroni_endpoints='http://db1:8008,ftp://u:" + marker + "@db2:8008'",
		err: "entry 2 (ftp://u:xxxxx@db2:8008) must be an http or https URL", key: "pgrouted_patroni_endpoints"},
	{name: "endpoint not a url", dsn: "host=db1 pgrouted_topology=patroni pgrouted_patroni_endpoints='http://u:" + marker + "@db 1:%zz'",
		err: "entry 1 is not a URL", key: "pgrouted_patroni_endpoints"},
	{name: "endpoint without host", dsn: "host=db1 pgrouted_topology=patroni pgrouted_patroni_endpoints=http://",
		err: "entry 1 (http:) has no host", key: "pgrouted_patroni_endpoints"},
	{name: "patroni timeout zero", dsn: "host=db1 pgrouted_patroni_timeout=0",
		err: "pgrouted_patroni_timeout (0) must be greater than 0", key: "pgrouted_patroni_timeout"},
	{name: "patroni timeout past the lease", dsn: "host=db1 pgrouted_topology=patroni pgrouted_patroni_endpoints=http://db1:8008 pgrouted_patroni_timeout=10s",
		err: "pgrouted_patroni_timeout (10s) must be less than pgrouted_lease (10s)", key: "pgrouted_patroni_timeout"},
	{name: "discover not bool", dsn: "host=db1 pgrouted_discover='yes please'",
		err: "pgrouted_discover", key: "pgrouted_discover"},

	// Every bound, at its edge and past it (bounds.go).
	{name: "every bound at its minimum", dsn: "host=db1 sslmode=disable pgrouted_probe_interval=10ms pgrouted_max_lag=11ms" +
		" pgrouted_latency_window=0.1ms pgrouted_pin_after_write=1ms pgrouted_write_timeout=1ms pgrouted_lease=11ms" +
		" pgrouted_replica_max_conns=1 pgrouted_circuit_failures=1 pgrouted_circuit_max_backoff=10ms" +
		" pgrouted_patroni_timeout=10ms pgrouted_replica_wait=1ms",
		hosts: plain("db1:5432"), set: func(c *Config) {
			c.ProbeInterval, c.MaxLag, c.LatencyWindow = 10*time.Millisecond, LagTime(11*time.Millisecond), 100*time.Microsecond
			c.PinAfterWrite, c.WriteTimeout, c.Lease = time.Millisecond, time.Millisecond, 11*time.Millisecond
			c.ReplicaMaxConns, c.CircuitFailures, c.CircuitMaxBackoff = 1, 1, 10*time.Millisecond
			c.PatroniTimeout, c.ReplicaWait = 10*time.Millisecond, time.Millisecond
		}},
	{name: "every bound at its maximum", dsn: "host=db1 sslmode=disable pgrouted_probe_interval=60m pgrouted_max_lag=1440m" +
		" pgrouted_latency_window=10s pgrouted_pin_after_write=60m pgrouted_write_timeout=60m pgrouted_lease=120m" +
		" pgrouted_replica_max_conns=10000 pgrouted_circuit_failures=1000 pgrouted_circuit_max_backoff=60m" +
		" pgrouted_patroni_timeout=1m pgrouted_replica_wait=60m pgrouted_weights=1000000",
		hosts: []hostWant{{name: "db1:5432", addr: "db1:5432", weight: MaxWeight}}, set: func(c *Config) {
			c.ProbeInterval, c.MaxLag, c.LatencyWindow = time.Hour, LagTime(24*time.Hour), 10*time.Second
			c.PinAfterWrite, c.WriteTimeout, c.Lease = time.Hour, time.Hour, 2*time.Hour
			c.ReplicaMaxConns, c.CircuitFailures, c.CircuitMaxBackoff = 10000, 1000, time.Hour
			c.PatroniTimeout, c.ReplicaWait = time.Minute, time.Hour
		}},
	// Every duration key in time.ParseDuration's syntax, at its bounds
	// too (h, us, µs, mixed units).
	{name: "every duration key in Go's syntax", dsn: "host=db1 sslmode=disable pgrouted_probe_interval=1m30s pgrouted_max_lag=1h" +
		" pgrouted_latency_window=250us pgrouted_pin_after_write=1.5s pgrouted_write_timeout=2m0.5s pgrouted_lease=1h30m" +
		" pgrouted_circuit_max_backoff=1h pgrouted_patroni_timeout=1500ms pgrouted_replica_wait=.25s",
		hosts: plain("db1:5432"), set: func(c *Config) {
			c.ProbeInterval, c.MaxLag, c.LatencyWindow = 90*time.Second, LagTime(time.Hour), 250*time.Microsecond
			c.PinAfterWrite, c.WriteTimeout, c.Lease = 1500*time.Millisecond, 2*time.Minute+500*time.Millisecond, 90*time.Minute
			c.CircuitMaxBackoff, c.PatroniTimeout, c.ReplicaWait = time.Hour, 1500*time.Millisecond, 250*time.Millisecond
		}},
	{name: "every bound at its minimum in Go's syntax", dsn: "postgres://db1/app?sslmode=disable&pgrouted_probe_interval=10000us&pgrouted_max_lag=11000000ns" +
		"&pgrouted_latency_window=100%C2%B5s&pgrouted_pin_after_write=1000%CE%BCs&pgrouted_write_timeout=1000us&pgrouted_lease=0.011s" +
		"&pgrouted_circuit_max_backoff=10ms&pgrouted_patroni_timeout=10ms&pgrouted_replica_wait=1000000ns",
		hosts: plain("db1:5432"), set: func(c *Config) {
			c.ProbeInterval, c.MaxLag, c.LatencyWindow = 10*time.Millisecond, LagTime(11*time.Millisecond), 100*time.Microsecond
			c.PinAfterWrite, c.WriteTimeout, c.Lease = time.Millisecond, time.Millisecond, 11*time.Millisecond
			c.CircuitMaxBackoff, c.PatroniTimeout, c.ReplicaWait = 10*time.Millisecond, 10*time.Millisecond, time.Millisecond
		}},
	{name: "every bound at its maximum in Go's syntax", dsn: "host=db1 sslmode=disable pgrouted_probe_interval=1h pgrouted_max_lag=24h" +
		" pgrouted_latency_window=10s pgrouted_pin_after_write=1h pgrouted_write_timeout=0.5h30m pgrouted_lease=2h" +
		" pgrouted_circuit_max_backoff=1h pgrouted_patroni_timeout=1m pgrouted_replica_wait=59m60s",
		hosts: plain("db1:5432"), set: func(c *Config) {
			c.ProbeInterval, c.MaxLag, c.LatencyWindow = time.Hour, LagTime(24*time.Hour), 10*time.Second
			c.PinAfterWrite, c.WriteTimeout, c.Lease = time.Hour, time.Hour, 2*time.Hour
			c.CircuitMaxBackoff, c.PatroniTimeout, c.ReplicaWait = time.Hour, time.Minute, time.Hour
		}},
	{name: "zero durations in Go's syntax", dsn: "host=db1 sslmode=disable pgrouted_pin_after_write=0s pgrouted_write_timeout=0ns pgrouted_replica_wait=-0",
		hosts: plain("db1:5432"), set: func(c *Config) { c.WriteTimeout = WriteNoWait }},
	{name: "bad latency_window of a microsecond in Go's syntax", dsn: "host=db1 pgrouted_latency_window=99µs",
		err: "pgrouted_latency_window (99µs) must be at least 100us", key: keyLatencyWindow},
	{name: "bad max_lag a nanosecond past its maximum", dsn: "host=db1 pgrouted_max_lag=24h1ns",
		err: "pgrouted_max_lag (24h1ns) must be at most 24h", key: keyMaxLag},
	{name: "bad lease a nanosecond past its maximum", dsn: "host=db1 pgrouted_lease=2h0.000000001s",
		err: "pgrouted_lease (2h0.000000001s) must be at most 2h", key: keyLease},
	{name: "bad patroni_timeout past its maximum in hours", dsn: "host=db1 pgrouted_patroni_timeout=1h",
		err: "pgrouted_patroni_timeout (1h) must be at most 1m", key: keyPatroniTimeout},
	{name: "bad circuit_max_backoff without a unit after the first", dsn: "host=db1 pgrouted_circuit_max_backoff=1m30",
		err: "pgrouted_circuit_max_backoff (1m30) is not a duration", key: keyCircuitMaxBackoff},
	{name: "bad pin_after_write without a unit", dsn: "host=db1 pgrouted_pin_after_write=5",
		err: "pgrouted_pin_after_write (5) has no unit: add one, e.g. 5ms", key: keyPinAfterWrite},
	{name: "bad write_timeout without a unit", dsn: "host=db1 pgrouted_write_timeout=30",
		err: "pgrouted_write_timeout (30) has no unit: add one, e.g. 30ms", key: keyWriteTimeout},
	{name: "bad lease without a unit", dsn: "host=db1 pgrouted_lease=10",
		err: "pgrouted_lease (10) has no unit: add one, e.g. 10ms", key: keyLease},
	{name: "bad circuit_max_backoff without a unit", dsn: "host=db1 pgrouted_circuit_max_backoff=30",
		err: "pgrouted_circuit_max_backoff (30) has no unit: add one, e.g. 30ms", key: keyCircuitMaxBackoff},
	{name: "bad patroni_timeout without a unit", dsn: "host=db1 pgrouted_patroni_timeout=2",
		err: "pgrouted_patroni_timeout (2) has no unit: add one, e.g. 2ms", key: keyPatroniTimeout},
	{name: "bad max_lag of a day", dsn: "host=db1 pgrouted_max_lag=25h",
		err: "pgrouted_max_lag (25h) must be at most 24h (none removes the budget)", key: keyMaxLag},
	// The replica pools' pgxpool settings.
	{name: "replica pool keys", dsn: "host=db1 sslmode=disable pgrouted_replica_max_conns=4 pgrouted_replica_min_conns=4 pgrouted_replica_min_idle_conns=2" +
		" pgrouted_replica_max_conn_lifetime=1m30s pgrouted_replica_max_conn_lifetime_jitter=10s pgrouted_replica_max_conn_idle_time=1s pgrouted_replica_health_check_period=100ms",
		hosts: plain("db1:5432"), set: func(c *Config) {
			c.ReplicaMaxConns, c.ReplicaMinConns, c.ReplicaMinIdleConns = 4, 4, 2
			c.ReplicaMaxConnLifetime, c.ReplicaMaxConnLifetimeJitter = 90*time.Second, 10*time.Second
			c.ReplicaMaxConnIdleTime, c.ReplicaHealthCheckPeriod = time.Second, 100*time.Millisecond
		}},
	{name: "replica pool keys at their maximum", dsn: "host=db1 sslmode=disable pgrouted_replica_max_conns=10000 pgrouted_replica_min_conns=10000 pgrouted_replica_min_idle_conns=10000" +
		" pgrouted_replica_max_conn_lifetime=24h pgrouted_replica_max_conn_lifetime_jitter=24h pgrouted_replica_max_conn_idle_time=24h pgrouted_replica_health_check_period=1h",
		hosts: plain("db1:5432"), set: func(c *Config) {
			c.ReplicaMaxConns, c.ReplicaMinConns, c.ReplicaMinIdleConns = 10000, 10000, 10000
			c.ReplicaMaxConnLifetime, c.ReplicaMaxConnLifetimeJitter = 24*time.Hour, 24*time.Hour
			c.ReplicaMaxConnIdleTime, c.ReplicaHealthCheckPeriod = 24*time.Hour, time.Hour
		}},
	{name: "bad replica_min_conns above replica_max_conns", dsn: "host=db1 pgrouted_replica_min_conns=11",
		err: "pgrouted_replica_min_conns (11) must be at most pgrouted_replica_max_conns (10)", key: keyReplicaMinConns},
	{name: "bad replica_min_idle_conns above replica_max_conns", dsn: "host=db1 pgrouted_replica_max_conns=2 pgrouted_replica_min_idle_conns=3",
		err: "pgrouted_replica_min_idle_conns (3) must be at most pgrouted_replica_max_conns (2)", key: keyReplicaMinIdleConns},
	{name: "bad replica_min_conns negative", dsn: "host=db1 pgrouted_replica_min_conns=-1",
		err: "pgrouted_replica_min_conns (-1) must be a whole number from 0 to 10000", key: keyReplicaMinConns},
	{name: "bad replica_min_conns word", dsn: "host=db1 pgrouted_replica_min_conns=some",
		err: "pgrouted_replica_min_conns (some) must be a whole number from 0 to 10000", key: keyReplicaMinConns},
	{name: "bad replica_max_conn_lifetime below its minimum", dsn: "host=db1 pgrouted_replica_max_conn_lifetime=999ms",
		err: "pgrouted_replica_max_conn_lifetime (999ms) must be at least 1s", key: keyReplicaMaxConnLifetime},
	{name: "bad replica_max_conn_lifetime zero", dsn: "host=db1 pgrouted_replica_max_conn_lifetime=0",
		err: "pgrouted_replica_max_conn_lifetime (0) must be greater than 0", key: keyReplicaMaxConnLifetime},
	{name: "bad replica_max_conn_lifetime above its maximum", dsn: "host=db1 pgrouted_replica_max_conn_lifetime=25h",
		err: "pgrouted_replica_max_conn_lifetime (25h) must be at most 24h", key: keyReplicaMaxConnLifetime},
	{name: "bad replica_max_conn_lifetime_jitter above its maximum", dsn: "host=db1 pgrouted_replica_max_conn_lifetime_jitter=24h1s",
		err: "pgrouted_replica_max_conn_lifetime_jitter (24h1s) must be at most 24h", key: keyReplicaMaxConnLifetimeJitter},
	{name: "bad replica_max_conn_idle_time without a unit", dsn: "host=db1 pgrouted_replica_max_conn_idle_time=30",
		err: "pgrouted_replica_max_conn_idle_time (30) has no unit: add one, e.g. 30ms", key: keyReplicaMaxConnIdleTime},
	{name: "bad replica_health_check_period below its minimum", dsn: "host=db1 pgrouted_replica_health_check_period=10ms",
		err: "pgrouted_replica_health_check_period (10ms) must be at least 100ms", key: keyReplicaHealthCheckPeriod},
	{name: "bad replica_health_check_period above its maximum", dsn: "host=db1 pgrouted_replica_health_check_period=2h",
		err: "pgrouted_replica_health_check_period (2h) must be at most 1h", key: keyReplicaHealthCheckPeriod},
	{name: "max_lag bytes bounds", dsn: "host=db1 sslmode=disable pgrouted_max_lag=1024GB",
		hosts: plain("db1:5432"), set: func(c *Config) { c.MaxLag = LagBytes(1 << 40) }},
	{name: "circuit_max_backoff default follows a long probe interval", dsn: "host=db1 sslmode=disable pgrouted_probe_interval=60m pgrouted_lease=120m pgrouted_max_lag=none",
		hosts: plain("db1:5432"), set: func(c *Config) {
			c.ProbeInterval, c.Lease, c.MaxLag = time.Hour, 2*time.Hour, LagNone()
			c.CircuitMaxBackoff = time.Hour // the probe interval, not 30s
		}},
	{name: "bad probe_interval below its minimum", dsn: "host=db1 password=" + marker + " pgrouted_probe_interval=0.000001ms",
		err: "pgrouted_probe_interval (0.000001ms) must be at least 10ms", key: keyProbeInterval},
	{name: "bad probe_interval above its maximum", dsn: "host=db1 pgrouted_probe_interval=61m",
		err: "pgrouted_probe_interval (61m) must be at most 1h", key: keyProbeInterval},
	{name: "bad max_lag above its maximum", dsn: "host=db1 pgrouted_max_lag=1441m",
		err: "pgrouted_max_lag (1441m) must be at most 24h (none removes the budget)", key: keyMaxLag},
	{name: "bad max_lag bytes above their maximum", dsn: "host=db1 pgrouted_max_lag=1025GB",
		err: "pgrouted_max_lag (1025GB) must be at most 1024GB", key: keyMaxLag},
	{name: "bad latency_window below its minimum", dsn: "host=db1 pgrouted_latency_window=0.05ms",
		err: "pgrouted_latency_window (0.05ms) must be at least 100us (off turns the window off)", key: keyLatencyWindow},
	{name: "bad latency_window above its maximum", dsn: "host=db1 pgrouted_latency_window=11s",
		err: "pgrouted_latency_window (11s) must be at most 10s", key: keyLatencyWindow},
	{name: "bad pin_after_write below its minimum", dsn: "host=db1 pgrouted_pin_after_write=0.5ms",
		err: "pgrouted_pin_after_write (0.5ms) must be at least 1ms (or 0: off)", key: keyPinAfterWrite},
	{name: "bad pin_after_write above its maximum", dsn: "host=db1 pgrouted_pin_after_write=61m",
		err: "pgrouted_pin_after_write (61m) must be at most 1h", key: keyPinAfterWrite},
	{name: "bad write_timeout below its minimum", dsn: "host=db1 pgrouted_write_timeout=0.000001ms",
		err: "pgrouted_write_timeout (0.000001ms) must be at least 1ms (or 0: no wait)", key: keyWriteTimeout},
	{name: "bad write_timeout of centuries", dsn: "host=db1 pgrouted_write_timeout=153722867m",
		err: "pgrouted_write_timeout (153722867m) must be at most 1h", key: keyWriteTimeout},
	{name: "bad lease above its maximum", dsn: "host=db1 pgrouted_lease=121m",
		err: "pgrouted_lease (121m) must be at most 2h", key: keyLease},
	{name: "bad replica_max_conns above its maximum", dsn: "host=db1 pgrouted_replica_max_conns=2147483647",
		err: "pgrouted_replica_max_conns (2147483647) must be a whole number from 1 to 10000", key: keyReplicaMaxConns},
	{name: "bad circuit_failures above its maximum", dsn: "host=db1 pgrouted_circuit_failures=1001",
		err: "pgrouted_circuit_failures (1001) must be at most 1000", key: keyCircuitFailures},
	{name: "bad circuit_max_backoff of a nanosecond", dsn: "host=db1 pgrouted_circuit_max_backoff=0.000001ms",
		err: "pgrouted_circuit_max_backoff (0.000001ms) must be at least 10ms", key: keyCircuitMaxBackoff},
	{name: "bad circuit_max_backoff above its maximum", dsn: "host=db1 pgrouted_circuit_max_backoff=61m",
		err: "pgrouted_circuit_max_backoff (61m) must be at most 1h", key: keyCircuitMaxBackoff},
	{name: "bad circuit_max_backoff below probe_interval", dsn: "postgres://db1?pgrouted_probe_interval=2s&pgrouted_circuit_max_backoff=1s",
		err: "pgrouted_circuit_max_backoff (1s) must be at least pgrouted_probe_interval (2s)", key: keyCircuitMaxBackoff},
	{name: "bad patroni_timeout below its minimum", dsn: "host=db1 pgrouted_patroni_timeout=5ms",
		err: "pgrouted_patroni_timeout (5ms) must be at least 10ms", key: keyPatroniTimeout},
	{name: "bad patroni_timeout above its maximum", dsn: "host=db1 pgrouted_patroni_timeout=61s",
		err: "pgrouted_patroni_timeout (61s) must be at most 1m", key: keyPatroniTimeout},
	{name: "bad replica_wait below its minimum", dsn: "host=db1 pgrouted_replica_wait=0.001ms",
		err: "pgrouted_replica_wait (0.001ms) must be at least 1ms (or 0: off)", key: keyReplicaWait},
	{name: "bad replica_wait of centuries", dsn: "host=db1 pgrouted_replica_wait=153722867m",
		err: "pgrouted_replica_wait (153722867m) must be at most 1h", key: keyReplicaWait},
	{name: "bad primary_read_limit above its maximum", dsn: "host=db1 pgrouted_primary_read_limit=10001",
		err: "pgrouted_primary_read_limit (10001) must be a whole number from 0 (no limit) to 10000", key: keyPrimaryReadLimit},
	{name: "bad primary_read_limit negative", dsn: "host=db1 pgrouted_primary_read_limit=-1",
		err: "pgrouted_primary_read_limit (-1) must be a whole number from 0 (no limit) to 10000", key: keyPrimaryReadLimit},
	{name: "bad primary_read_limit not a number", dsn: "host=db1 pgrouted_primary_read_limit=many",
		err: "pgrouted_primary_read_limit (many) must be a whole number from 0 (no limit) to 10000", key: keyPrimaryReadLimit},

	// Names and hosts that logs, metrics and terminals show.
	{name: "names not UTF-8", dsn: "postgres://u:" + marker + "@db1,db2,db3/app?pgrouted_names=a%ff,b,c",
		err: `pgrouted_names (a\xff,b,c): entry 1 ("a\xff"): byte 2 (\xff) is not UTF-8`, key: keyNames},
	{name: "names with a direction override", dsn: "postgres://db1,db2/app?pgrouted_names=ab%E2%80%AEc,d",
		err: `entry 1 ("ab\u202ec"): byte 3 is U+202E, a format character`, key: keyNames},
	{name: "names with a zero-width space", dsn: "host=db1,db2 pgrouted_names='a,b\u200b'",
		err: `entry 2 ("b\u200b"): byte 2 is U+200B, a format character`, key: keyNames},
	{name: "names with a line separator", dsn: "host=db1,db2 pgrouted_names='a\u2028x,b'",
		err: `byte 2 is U+2028, a line or paragraph separator`, key: keyNames},
	{name: "names with a tab", dsn: "host=db1,db2 pgrouted_names='a	x,b'",
		err: `byte 2 is U+0009, a control character`, key: keyNames},
	{name: "host with a direction override", dsn: "host=db1,db\u202e2 password=" + marker,
		err: `host 2 ("db\u202e2:5432"): byte 3 is U+202E, a format character`, key: "host"},
	{name: "host not UTF-8", dsn: "postgres://u:" + marker + "@db1,db%ff/app",
		err: `host 2 ("db\xff:5432"): byte 3 (\xff) is not UTF-8`, key: "host"},
	{name: "unix socket not UTF-8", dsn: "host=/tmp/\xff",
		err: `byte 6 (\xff) is not UTF-8`, key: "host"},
	{name: "names of any script", dsn: "postgres://db1,db2/app?sslmode=disable&pgrouted_names=%E6%9D%B1%E4%BA%AC,%F0%9F%90%98",
		hosts: []hostWant{{name: "東京", addr: "db1:5432", weight: 1}, {name: "🐘", addr: "db2:5432", weight: 1}}},
	{name: "endpoint with a direction override", dsn: "postgres://u:" + marker + "@db1/app?pgrouted_topology=patroni&pgrouted_patroni_endpoints=http%3A%2F%2Fpatroni%3A" + marker + "%40pg%E2%80%AE1%3A8008",
		err: `entry 1 (http://patroni:xxxxx@pg%E2%80%AE1:8008): in the host, byte 3 is U+202E, a format character`, key: keyPatroniEndpoints},
	{name: "endpoint not UTF-8", dsn: "host=db1 pgrouted_topology=patroni pgrouted_patroni_endpoints=http://db1:8008/p\xff",
		err: `entry 1 (http://db1:8008/p%FF): in the path, byte 3 (\xff) is not UTF-8`, key: keyPatroniEndpoints},
	{name: "function name with a direction override", dsn: "host=db1 pgrouted_read_functions='a,b\u202e'",
		err: `pgrouted_read_functions (a,b\u202e) entry 2 ("b\u202e"): byte 2 is U+202E, a format character`, key: keyReadFunctions},
	{name: "discover max", dsn: "host=db1 sslmode=disable pgrouted_discover_max=256",
		hosts: plain("db1:5432"), set: func(c *Config) { c.DiscoverMax = 256 }},
	{name: "discover max zero", dsn: "host=db1 pgrouted_discover_max=0",
		err: "pgrouted_discover_max (0) must be a whole number from 1 to 256", key: "pgrouted_discover_max"},
	{name: "discover max too many", dsn: "host=db1 pgrouted_discover_max=257",
		err: "pgrouted_discover_max (257) must be a whole number from 1 to 256", key: "pgrouted_discover_max"},
	{name: "discover max not a number", dsn: "host=db1 pgrouted_discover_max=lots",
		err: "pgrouted_discover_max (lots) must be a whole number from 1 to 256", key: "pgrouted_discover_max"},
}

// TestParse runs the table.
func TestParse(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			isolateEnv(t, tc.env)
			cfg, err := Parse(tc.dsn)
			if tc.err != "" {
				checkError(t, err, tc.err, tc.key)
				if cfg != nil {
					t.Errorf("config %v with the error", cfg)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.dsn, err)
			}
			checkHosts(t, cfg, tc.hosts)
			want := defaultConfig()
			if tc.set != nil {
				tc.set(want)
			}
			cfg2 := *cfg
			cfg2.Hosts, cfg2.src = nil, nil
			if !reflect.DeepEqual(&cfg2, want) {
				t.Errorf("routing settings\n got %#v\nwant %#v", routingOnly(&cfg2), routingOnly(want))
			}
			checkNoRoutingParams(t, cfg, tc.dsn)
			if tc.check != nil {
				tc.check(t, cfg)
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

// routingOnly prints the routing settings of c, for a diff.
func routingOnly(c *Config) string {
	return fmt.Sprintf("%v %v %v %v %v %v %v %v %v %v %v %v %v %v %v %v %v %v %v %v pool %v %v %v %v %v %v",
		c.Consistency, c.MaxLag, c.ProbeInterval, c.SelectPolicy, c.LatencyWindow, c.Fallback, c.ReadOnlyTx,
		c.PinAfterWrite, c.WriteTimeout, c.Lease, c.ReplicaMaxConns, c.CircuitFailures, c.CircuitMaxBackoff, c.StrictBoot,
		c.Topology, redactEndpoints(c.PatroniEndpoints), c.PatroniTimeout, c.Discover, c.DiscoverMax, c.ReplicaWait,
		c.ReplicaMinConns, c.ReplicaMinIdleConns, c.ReplicaMaxConnLifetime, c.ReplicaMaxConnLifetimeJitter,
		c.ReplicaMaxConnIdleTime, c.ReplicaHealthCheckPeriod)
}

func checkError(t *testing.T, err error, text, key string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one with %q", text)
	}
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("error %T %v is not a *ParseError", err, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, text) {
		t.Errorf("error %q does not contain %q", msg, text)
	}
	if pe.Key != key {
		t.Errorf("error %q: Key %q, want %q", msg, pe.Key, key)
	}
	if key != "" && !strings.Contains(msg, key) {
		t.Errorf("error %q does not name the key %s", msg, key)
	}
	if strings.Contains(msg, marker) || strings.Contains(pe.Key, marker) {
		t.Errorf("error %q shows the password", msg)
	}
	if !strings.HasPrefix(msg, "pgrouted dsn: ") {
		t.Errorf("error %q lacks the prefix", msg)
	}
	if Printable(msg) != msg || Printable(pe.Key) != pe.Key {
		t.Errorf("error %q (key %q) holds bytes that are not UTF-8 or control or format characters", msg, pe.Key)
	}
	checkChain(t, err, marker)
}

func checkHosts(t *testing.T, cfg *Config, want []hostWant) {
	t.Helper()
	if len(cfg.Hosts) != len(want) {
		t.Fatalf("%d hosts %v, want %d", len(cfg.Hosts), cfg.Hosts, len(want))
	}
	for i, w := range want {
		h := cfg.Hosts[i]
		cc := h.ConnConfig
		got := hostWant{h.Name, h.Addr, h.Weight, cc.TLSConfig != nil, len(cc.Fallbacks)}
		if got != w {
			t.Errorf("host %d: got %+v, want %+v", i, got, w)
		}
		if _, addr := pgconn.NetworkAddress(cc.Host, cc.Port); addr != h.Addr {
			t.Errorf("host %d: ConnConfig at %s, Addr %s", i, addr, h.Addr)
		}
		for _, fb := range cc.Fallbacks {
			if fb.Host != cc.Host || fb.Port != cc.Port {
				t.Errorf("host %d (%s): a fallback to another host %s:%d", i, h.Addr, fb.Host, fb.Port)
			}
		}
	}
}

// checkNoRoutingParams checks that no pgrouted_ key is left among a host's
// run-time parameters, where pgx would send it to the server.
//
// ConnString is another matter. pgx parses the whole connection string, and
// its ConnConfig keeps that string as given, pgrouted_ keys included, as a
// pgxpool.Config keeps its pool_ keys: only a tokenizer of our own (the one
// Parse had before) could hand pgx a string without them. Nothing parses
// ConnString again, so the check is that it is exactly the string Parse
// was given.
func checkNoRoutingParams(t *testing.T, cfg *Config, dsn string) {
	t.Helper()
	for _, h := range cfg.Hosts {
		for k := range h.ConnConfig.RuntimeParams {
			if isRoutingKey(k) || isPoolKey(k) {
				t.Errorf("%s: runtime parameter %s would reach the server", h.Name, k)
			}
		}
		if got := h.ConnConfig.ConnString(); got != dsn {
			t.Errorf("%s: ConnString %q, want the connection string as given, %q", h.Name, redactMarker(got), redactMarker(dsn))
		}
	}
}

// TestRoundTrip checks, for every DSN of the table that parses, that Format
// parses back to an equal Config, and that Redacted, String and fmt's verbs
// never show the password.
func TestRoundTrip(t *testing.T) {
	for _, tc := range cases {
		if tc.err != "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			isolateEnv(t, tc.env)
			cfg, err := Parse(tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			formatted := Format(cfg)
			back, err := Parse(formatted)
			if err != nil {
				t.Fatalf("Parse(Format) = %v\nformatted: %s", err, redactMarker(formatted))
			}
			if diff := diffConfig(cfg, back); diff != "" {
				t.Errorf("Format→Parse differs: %s\nformatted: %s", diff, redactMarker(formatted))
			}
			if again := Format(back); again != formatted {
				t.Errorf("Format is not stable:\n%s\n%s", redactMarker(formatted), redactMarker(again))
			}
			checkNoPassword(t, cfg)
		})
	}
}

func redactMarker(s string) string { return strings.ReplaceAll(s, marker, "MARKER") }

// checkNoPassword checks every way of printing cfg for its password.
func checkNoPassword(t *testing.T, cfg *Config) {
	t.Helper()
	var passwords []string
	for _, h := range cfg.Hosts {
		if p := h.ConnConfig.Password; len(p) >= minSecret {
			passwords = append(passwords, p)
		}
	}
	if strings.Contains(Format(cfg), marker) {
		passwords = append(passwords, marker)
	}
	for _, text := range []string{cfg.String(), cfg.Redacted(), fmt.Sprint(cfg), fmt.Sprint(*cfg),
		fmt.Sprintf("%+v", *cfg), fmt.Sprintf("%#v", *cfg), fmt.Sprintf("%v", cfg.Hosts)} {
		for _, p := range passwords {
			if strings.Contains(text, p) {
				t.Errorf("%q shows the password", redactMarker(text))
			}
		}
	}
}

// diffConfig returns "" when a and b are equal Configs: the same routing
// settings, and hosts with the same name, address, weight and pgx settings.
func diffConfig(a, b *Config) string {
	ra, rb := *a, *b
	ra.Hosts, ra.src, rb.Hosts, rb.src = nil, nil, nil, nil
	if !reflect.DeepEqual(ra, rb) {
		return fmt.Sprintf("routing %s vs %s", routingOnly(&ra), routingOnly(&rb))
	}
	if len(a.Hosts) != len(b.Hosts) {
		return fmt.Sprintf("%d hosts vs %d", len(a.Hosts), len(b.Hosts))
	}
	for i := range a.Hosts {
		ha, hb := a.Hosts[i], b.Hosts[i]
		if ha.Name != hb.Name || ha.Addr != hb.Addr || ha.Weight != hb.Weight {
			return fmt.Sprintf("host %d: %s %s %d vs %s %s %d", i, ha.Name, ha.Addr, ha.Weight, hb.Name, hb.Addr, hb.Weight)
		}
		if sa, sb := connSummary(ha.ConnConfig), connSummary(hb.ConnConfig); sa != sb {
			return fmt.Sprintf("host %d:\n%s\nvs\n%s", i, redactMarker(sa), redactMarker(sb))
		}
	}
	return ""
}

// connSummary prints what a pgx config holds, short of functions.
func connSummary(cc *pgx.ConnConfig) string {
	tlsSummary := func(c *tls.Config) string {
		if c == nil {
			return "plain"
		}
		return fmt.Sprintf("tls(sni=%q skip=%v verify=%v roots=%v certs=%d)",
			c.ServerName, c.InsecureSkipVerify, c.VerifyPeerCertificate != nil, c.RootCAs != nil, len(c.Certificates))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d db=%q user=%q pw=%q timeout=%v %s", cc.Host, cc.Port, cc.Database, cc.User, cc.Password,
		cc.ConnectTimeout, tlsSummary(cc.TLSConfig))
	for _, fb := range cc.Fallbacks {
		fmt.Fprintf(&b, " fallback %s:%d %s", fb.Host, fb.Port, tlsSummary(fb.TLSConfig))
	}
	for _, k := range slices.Sorted(maps.Keys(cc.RuntimeParams)) {
		fmt.Fprintf(&b, " %s=%q", k, cc.RuntimeParams[k])
	}
	fmt.Fprintf(&b, " neg=%q certmode=%q krb=%q/%q validate=%v proto=%s-%s cb=%s auth=%q cache=%d/%d mode=%v",
		cc.SSLNegotiation, cc.SSLCertMode, cc.KerberosSrvName, cc.KerberosSpn, cc.ValidateConnect != nil,
		cc.MinProtocolVersion, cc.MaxProtocolVersion, cc.ChannelBinding, cc.RequireAuth,
		cc.StatementCacheCapacity, cc.DescriptionCacheCapacity, cc.DefaultQueryExecMode)
	return b.String()
}

// TestParseMatchesPgx checks the hosts split: for every DSN of the table that
// parses, pgx given the whole string (pgrouted_ keys and all) makes the
// same connection attempts, with the same settings, as the hosts' configs
// together.
func TestParseMatchesPgx(t *testing.T) {
	for _, tc := range cases {
		if tc.err != "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			isolateEnv(t, tc.env)
			cfg, err := Parse(tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			if diff := diffPgx(tc.dsn, cfg); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// diffPgx compares cfg's hosts with pgx's parse of the whole of dsn.
func diffPgx(dsn string, cfg *Config) string {
	whole, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Sprintf("pgx rejects what Parse accepts: %v", err)
	}
	for k := range whole.RuntimeParams {
		if isRoutingKey(k) || isPoolKey(k) {
			delete(whole.RuntimeParams, k)
		}
	}
	joined := cfg.Hosts[0].ConnConfig.Copy()
	joined.Fallbacks = nil
	for i, h := range cfg.Hosts {
		if i > 0 {
			joined.Fallbacks = append(joined.Fallbacks, &pgconn.FallbackConfig{
				Host: h.ConnConfig.Host, Port: h.ConnConfig.Port, TLSConfig: h.ConnConfig.TLSConfig})
		}
		joined.Fallbacks = append(joined.Fallbacks, h.ConnConfig.Fallbacks...)
	}
	if a, b := connSummary(whole), connSummary(joined); a != b {
		return fmt.Sprintf("pgx: %s\n ours: %s", redactMarker(a), redactMarker(b))
	}
	return ""
}

// TestParseServiceFile: pgx reads the service file; pgrouted_ keys in it
// apply where the connection string does not set them, and never reach the
// server.
func TestParseServiceFile(t *testing.T) {
	isolateEnv(t, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "pg_service.conf")
	err := os.WriteFile(file, []byte(`[svc]
host=s1,s2
port=5440
dbname=svcdb
sslmode=disable
pgrouted_select=random
pgrouted_max_lag=3s

[bad]
host=s1
pgrouted_selcet=random
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	dsn := "service=svc servicefile=" + file + " pgrouted_max_lag=5s"
	cfg, err := Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	checkHosts(t, cfg, plain("s1:5440", "s2:5440"))
	checkNoRoutingParams(t, cfg, dsn)
	if cfg.SelectPolicy != SelectRandom || cfg.MaxLag != LagTime(5*time.Second) {
		t.Errorf("select %v max_lag %v, want random (service file) and 5s (connection string)", cfg.SelectPolicy, cfg.MaxLag)
	}
	if db := cfg.Hosts[0].ConnConfig.Database; db != "svcdb" {
		t.Errorf("database %q", db)
	}
	back, err := Parse(Format(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if diff := diffConfig(cfg, back); diff != "" {
		t.Error(diff)
	}

	_, err = Parse("service=bad servicefile=" + file)
	checkError(t, err, "unknown key pgrouted_selcet (did you mean pgrouted_select?)", "pgrouted_selcet")
}

// TestParseErrorUnwrap: a pgx error stays reachable.
func TestParseErrorUnwrap(t *testing.T) {
	isolateEnv(t, nil)
	_, err := Parse("postgres://u:" + marker + "@db1:x/db")
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		t.Fatalf("%v does not unwrap to a *pgconn.ParseConfigError", err)
	}
	_, err = Parse("host=db1 pgrouted_select=x")
	if errors.Unwrap(err) != nil {
		t.Errorf("a routing error unwraps to %v", errors.Unwrap(err))
	}
}
