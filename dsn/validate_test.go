package dsn

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// validBase is a Config that passes Validate, for TestValidate to break.
func validBase(t *testing.T) *Config {
	t.Helper()
	isolateEnv(t, nil)
	cfg, err := Parse("postgres://app:" + marker + "@db1,db2,db3/app?sslmode=disable&pgrouted_names=a,b,c")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestValidate holds a Config built or changed in code to the rules of
// Parse: each rule's message names its key.
func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		err    string
		key    string
	}{
		{"no host", func(c *Config) { c.Hosts = nil }, "no host: host must name at least one server", "host"},
		{"host without address", func(c *Config) { c.Hosts[1].Addr = "" }, "host 2 has no address", "host"},
		{"host without ConnConfig", func(c *Config) { c.Hosts[2].ConnConfig = nil }, "host db3:5432 has no ConnConfig", "host"},
		{"repeated host", func(c *Config) { c.Hosts[2].Addr = "DB1:5432" }, "host DB1:5432 is listed twice (hosts 1 and 3)", "host"},
		{"name with comma", func(c *Config) { c.Hosts[0].Name = "x,y" }, `entry 1 ("x,y") must not hold commas`, keyNames},
		{"name with space around", func(c *Config) { c.Hosts[0].Name = " x" }, "surrounding space", keyNames},
		{"name with control", func(c *Config) { c.Hosts[0].Name = "x\n" }, `entry 1 ("x\n"): byte 2 is U+000A, a control character`, keyNames},
		{"name reserved", func(c *Config) { c.Hosts[2].Name = "PRIMARY" }, "entry 3: the name primary is reserved", keyNames},
		{"name repeated", func(c *Config) { c.Hosts[2].Name = "B" }, "entries 2 and 3 are both B; names must be unique", keyNames},
		{"name is the password", func(c *Config) { c.Hosts[0].Name, c.Hosts[1].Name = marker, marker }, "names must be unique", keyNames},
		{"weight negative", func(c *Config) { c.Hosts[1].Weight = -1 }, "pgrouted_weights (1,-1,1): entry 2 (-1) must be a whole number from 1 to 1000000", keyWeights},
		{"weight too large", func(c *Config) { c.Hosts[0].Weight = MaxWeight + 1 }, "entry 1 (1000001)", keyWeights},
		{"consistency unknown", func(c *Config) { c.Consistency = "strict" }, "pgrouted_consistency (strict) must be one of session, eventual, causal, global", keyConsistency},
		{"max_lag zero time", func(c *Config) { c.MaxLag = LagTime(0) }, "pgrouted_max_lag (0s) must be greater than 0", keyMaxLag},
		{"max_lag negative bytes", func(c *Config) { c.MaxLag = LagBytes(-1) }, "pgrouted_max_lag (-1B) must be greater than 0", keyMaxLag},
		{"max_lag equal to probe", func(c *Config) { c.MaxLag = LagTime(time.Second) },
			"pgrouted_max_lag (1s) must be greater than pgrouted_probe_interval (1s)", keyMaxLag},
		{"probe negative", func(c *Config) { c.ProbeInterval = -time.Second }, "pgrouted_probe_interval (-1s) must not be negative", keyProbeInterval},
		{"select unknown", func(c *Config) { c.SelectPolicy = "fastest" }, "pgrouted_select (fastest) must be one of", keySelect},
		{"latency negative", func(c *Config) { c.LatencyWindow = -5 * time.Millisecond }, "pgrouted_latency_window (-5ms) must not be negative", keyLatencyWindow},
		{"fallback unknown", func(c *Config) { c.Fallback = "retry" }, "pgrouted_fallback (retry) must be one of primary, error", keyFallback},
		{"readonly_tx unknown", func(c *Config) { c.ReadOnlyTx = "any" }, "pgrouted_readonly_tx (any) must be one of replica, primary", keyReadOnlyTx},
		{"pin negative", func(c *Config) { c.PinAfterWrite = -time.Millisecond }, "pgrouted_pin_after_write (-1ms) must not be negative", keyPinAfterWrite},
		{"replica_wait negative", func(c *Config) { c.ReplicaWait = -time.Millisecond }, "pgrouted_replica_wait (-1ms) must not be negative", keyReplicaWait},
		{"write_timeout negative", func(c *Config) { c.WriteTimeout = -time.Second }, "pgrouted_write_timeout (-1s) must not be negative", keyWriteTimeout},
		{"lease negative", func(c *Config) { c.Lease = -time.Second }, "pgrouted_lease (-1s) must not be negative", keyLease},
		{"max_lag not above a long probe interval", func(c *Config) {
			c.MaxLag = LagTime(30 * time.Second)
			c.ProbeInterval = 30 * time.Second
			c.Lease = time.Minute
		},
			"pgrouted_max_lag (30s) must be greater than pgrouted_probe_interval (30s)", keyMaxLag},
		{"latency negative", func(c *Config) { c.LatencyWindow = -5 * time.Millisecond }, "pgrouted_latency_window (-5ms) must not be negative", keyLatencyWindow},
		{"write_timeout negative other than WriteNoWait", func(c *Config) { c.WriteTimeout = -2 }, "pgrouted_write_timeout (-2ns) must not be negative", keyWriteTimeout},
		{"lease equal to probe", func(c *Config) { c.Lease = 2 * time.Second; c.ProbeInterval = 2 * time.Second },
			"pgrouted_lease (2s) must be greater than pgrouted_probe_interval (2s)", keyLease},
		{"replica_max_conns negative", func(c *Config) { c.ReplicaMaxConns = -1 }, "pgrouted_replica_max_conns (-1) must not be negative", keyReplicaMaxConns},
		{"circuit_failures negative", func(c *Config) { c.CircuitFailures = -1 }, "pgrouted_circuit_failures (-1) must be at least 1", keyCircuitFailures},
		{"circuit_max_backoff negative", func(c *Config) { c.CircuitMaxBackoff = -time.Second }, "pgrouted_circuit_max_backoff (-1s) must not be negative", keyCircuitMaxBackoff},

		// Names and hosts that logs, metrics and terminals show.
		{"name not UTF-8", func(c *Config) { c.Hosts[0].Name = "a\xff" }, `entry 1 ("a\xff"): byte 2 (\xff) is not UTF-8`, keyNames},
		{"name with a direction override", func(c *Config) { c.Hosts[1].Name = "b\u202e" }, `entry 2 ("b\u202e"): byte 2 is U+202E, a format character`, keyNames},
		{"name with a tag character", func(c *Config) { c.Hosts[1].Name = "b\U000E0041" }, `entry 2 ("b\U000e0041"): byte 2 is U+E0041, a format character`, keyNames},
		{"address with a direction override", func(c *Config) { c.Hosts[2].Addr = "db\u202e3:5432" }, `host 3 ("db\u202e3:5432"): byte 3 is U+202E, a format character`, "host"},
		{"address not UTF-8", func(c *Config) { c.Hosts[2].Addr = "db3\xfe:5432" }, `host 3 ("db3\xfe:5432"): byte 4 (\xfe) is not UTF-8`, "host"},
		{"pgx host with a control character", func(c *Config) { c.Hosts[0].ConnConfig.Host = "db1\x1b[2J" }, `host 1 ("db1\x1b[2J"): byte 4 is U+001B, a control character`, "host"},

		// Every bound, in code as in a connection string (bounds.go).
		{"probe of a microsecond", func(c *Config) { c.ProbeInterval = time.Microsecond }, "pgrouted_probe_interval (1us) must be at least 10ms", keyProbeInterval},
		{"probe too long", func(c *Config) { c.ProbeInterval = 2 * time.Hour }, "pgrouted_probe_interval (2h) must be at most 1h", keyProbeInterval},
		{"max_lag too long", func(c *Config) { c.MaxLag = LagTime(292 * 365 * 24 * time.Hour) }, "pgrouted_max_lag (2557920h) must be at most 24h", keyMaxLag},
		{"max_lag too many bytes", func(c *Config) { c.MaxLag = LagBytes(2 << 40) }, "pgrouted_max_lag (2048GB) must be at most 1024GB", keyMaxLag},
		{"latency window too short", func(c *Config) { c.LatencyWindow = time.Microsecond }, "pgrouted_latency_window (1us) must be at least 100us", keyLatencyWindow},
		{"latency window too long", func(c *Config) { c.LatencyWindow = time.Minute }, "pgrouted_latency_window (1m) must be at most 10s", keyLatencyWindow},
		{"pin too short", func(c *Config) { c.PinAfterWrite = time.Microsecond }, "pgrouted_pin_after_write (1us) must be at least 1ms (or 0: off)", keyPinAfterWrite},
		{"pin too long", func(c *Config) { c.PinAfterWrite = 2 * time.Hour }, "pgrouted_pin_after_write (2h) must be at most 1h", keyPinAfterWrite},
		{"write_timeout too short", func(c *Config) { c.WriteTimeout = 1 }, "pgrouted_write_timeout (1ns) must be at least 1ms (or 0: no wait)", keyWriteTimeout},
		{"write_timeout of centuries", func(c *Config) { c.WriteTimeout = math.MaxInt64 }, "must be at most 1h", keyWriteTimeout},
		{"replica_wait of centuries", func(c *Config) { c.ReplicaWait = math.MaxInt64 }, "pgrouted_replica_wait (9223372036854775807ns) must be at most 1h", keyReplicaWait},
		{"lease too long", func(c *Config) { c.Lease = 3 * time.Hour }, "pgrouted_lease (3h) must be at most 2h", keyLease},
		{"replica_max_conns too many", func(c *Config) { c.ReplicaMaxConns = math.MaxInt32 }, "pgrouted_replica_max_conns (2147483647) must be a whole number from 1 to 10000", keyReplicaMaxConns},
		{"primary max conns negative", func(c *Config) { c.PrimaryMaxConns = -1 }, "pool_max_conns (-1) must not be negative (0 means no cap)", keyPrimaryMaxConns},
		{"primary max conns too many", func(c *Config) { c.PrimaryMaxConns = 10001 }, "pool_max_conns (10001) must be a whole number from 1 to 10000", keyPrimaryMaxConns},
		{"primary min conns above max", func(c *Config) { c.PrimaryMaxConns, c.PrimaryMinConns = 2, 3 }, "pool_min_conns (3) must be at most pool_max_conns (2)", keyPrimaryMinConns},
		{"primary lifetime below its minimum", func(c *Config) { c.PrimaryMaxConnLifetime = time.Millisecond }, "pool_max_conn_lifetime (1ms) must be at least 1s (or 0: none)", keyPrimaryMaxConnLifetime},
		{"primary idle time negative", func(c *Config) { c.PrimaryMaxConnIdleTime = -time.Second }, "pool_max_conn_idle_time (-1s) must not be negative", keyPrimaryMaxConnIdleTime},
		{"primary health check period too long", func(c *Config) { c.PrimaryHealthCheckPeriod = 2 * time.Hour }, "pool_health_check_period (2h) must be at most 1h", keyPrimaryHealthCheckPeriod},
		{"circuit_failures too many", func(c *Config) { c.CircuitFailures = 1001 }, "pgrouted_circuit_failures (1001) must be at most 1000", keyCircuitFailures},
		{"circuit_max_backoff of a nanosecond", func(c *Config) { c.CircuitMaxBackoff = 1 }, "pgrouted_circuit_max_backoff (1ns) must be at least 10ms", keyCircuitMaxBackoff},
		{"circuit_max_backoff too long", func(c *Config) { c.CircuitMaxBackoff = 2 * time.Hour }, "pgrouted_circuit_max_backoff (2h) must be at most 1h", keyCircuitMaxBackoff},
		{"circuit_max_backoff below the probe interval", func(c *Config) { c.ProbeInterval, c.CircuitMaxBackoff = 2*time.Second, time.Second },
			"pgrouted_circuit_max_backoff (1s) must be at least pgrouted_probe_interval (2s)", keyCircuitMaxBackoff},
		{"patroni_timeout too short", func(c *Config) { c.PatroniTimeout = time.Millisecond }, "pgrouted_patroni_timeout (1ms) must be at least 10ms", keyPatroniTimeout},
		{"patroni_timeout too long", func(c *Config) { c.PatroniTimeout = time.Hour }, "pgrouted_patroni_timeout (1h) must be at most 1m", keyPatroniTimeout},
		// The probe interval set alone is the key named, not the
		// pgrouted_max_lag default that follows it.
		{"probe too long alone", func(c *Config) {
			c.ProbeInterval, c.Lease, c.MaxLag, c.CircuitMaxBackoff = 10*time.Hour, 20*time.Hour, LagBudget{}, 0
		}, "pgrouted_probe_interval (10h) must be at most 1h", keyProbeInterval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validBase(t)
			tt.change(cfg)
			checkError(t, cfg.Validate(), tt.err, tt.key)
		})
	}

	t.Run("valid", func(t *testing.T) {
		cfg := validBase(t)
		cfg.LatencyWindow = LatencyWindowOff
		cfg.MaxLag = LagBytes(1)
		cfg.WriteTimeout = WriteNoWait
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestZeroMeansDefault: a zero field is its default, as in gobreaker's
// Settings. A Config built in code with nothing but its hosts validates,
// formats as a connection string that sets no routing key, and
// SetDefaults gives it the defaults Parse gives a string without any.
func TestZeroMeansDefault(t *testing.T) {
	isolateEnv(t, nil)
	var hosts []Host
	for _, h := range []string{"db1", "db2"} {
		cc, err := pgx.ParseConfig("host=" + h + " user=app sslmode=disable")
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, Host{Addr: h + ":5432", ConnConfig: cc})
	}
	cfg := &Config{Hosts: hosts}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a zero Config with hosts: %v", err)
	}
	if cfg.ProbeInterval != 0 || cfg.Hosts[0].Name != "" {
		t.Error("Validate changed the Config")
	}
	if got, want := Format(cfg), "host=db1,db2 port=5432 user=app sslmode=disable"; got != want {
		t.Errorf("Format\n got %s\nwant %s", got, want)
	}
	cfg.SetDefaults()
	parsed, err := Parse("host=db1,db2 user=app sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	if diff := diffConfig(parsed, cfg); diff != "" {
		t.Errorf("SetDefaults and Parse differ: %s", diff)
	}
	if cfg.MaxLag != LagTime(DefaultMaxLag) || cfg.ReplicaMaxConns != DefaultReplicaMaxConns || cfg.LatencyWindow != DefaultLatencyWindow ||
		cfg.WriteTimeout != DefaultWriteTimeout || cfg.SelectPolicy != DefaultSelectPolicy || cfg.Hosts[1].Name != "db2:5432" || cfg.Hosts[1].Weight != DefaultWeight {
		t.Errorf("defaults: %s", routingOnly(cfg))
	}

	// The default budget follows a long probe interval: three intervals,
	// so that a probe interval set alone never makes the default invalid.
	for _, tc := range []struct{ probe, want time.Duration }{
		{time.Second, DefaultMaxLag}, {10 * time.Second, DefaultMaxLag}, {11 * time.Second, 33 * time.Second}, {time.Hour, 3 * time.Hour},
	} {
		c := &Config{Hosts: hosts, ProbeInterval: tc.probe, Lease: 2 * tc.probe}
		if err := c.Validate(); err != nil {
			t.Errorf("probe interval %v alone: %v", tc.probe, err)
		}
		c.SetDefaults()
		if d, ok := c.MaxLag.Time(); !ok || d != tc.want || d <= tc.probe {
			t.Errorf("probe interval %v: default max_lag %v, want %v", tc.probe, c.MaxLag, tc.want)
		}
	}
	// Set explicitly, none stays none.
	c := &Config{Hosts: hosts, MaxLag: LagNone()}
	c.SetDefaults()
	if !c.MaxLag.IsNone() {
		t.Errorf("LagNone became %v", c.MaxLag)
	}
}

// TestCloneIsDeep: changing a clone's hosts leaves the original alone.
func TestCloneIsDeep(t *testing.T) {
	cfg := validBase(t)
	c := cfg.Clone()
	c.Hosts[0].Name = "changed"
	c.Hosts[0].ConnConfig.RuntimeParams["x"] = "y"
	c.Hosts[0].ConnConfig.Password = "other"
	if cfg.Hosts[0].Name != "a" || cfg.Hosts[0].ConnConfig.RuntimeParams["x"] != "" || cfg.Hosts[0].ConnConfig.Password != marker {
		t.Error("Clone shares the hosts")
	}
	if (*Config)(nil).Clone() != nil {
		t.Error("Clone of nil")
	}
}

// TestFormatBuiltInCode: when the hosts are not the parsed ones, Format
// writes the PostgreSQL part from the hosts' ConnConfigs, and that parses
// back to an equal Config.
func TestFormatBuiltInCode(t *testing.T) {
	for _, tc := range []struct{ name, dsn string }{
		{"disable", "host=db1,db2,db3 port=5432,5433,5434 user=app password=" + marker + " dbname=app sslmode=disable application_name=web"},
		{"prefer", "postgres://app:" + marker + "@db1,db2,db3/app?connect_timeout=3&search_path=a%20b"},
		{"allow", "host=db1,db2,db3 sslmode=allow user=app"},
		{"require", "host=db1,db2,db3 sslmode=require sslsni=0 user=app password='it\\'s'"},
		{"verify-full", "host=db1,[::1],db3 sslmode=verify-full user=app channel_binding=require"},
		{"unix and tcp", "host=/tmp,db2,db3 port=5432 sslmode=prefer statement_cache_capacity=10 default_query_exec_mode=exec"},
		{"protocol", "host=db1,db2,db3 sslmode=disable min_protocol_version=3.2 require_auth=scram-sha-256 krbsrvname=pg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			isolateEnv(t, nil)
			parsed, err := Parse(tc.dsn + " pgrouted_select=nearest")
			if strings.HasPrefix(tc.dsn, "postgres://") {
				parsed, err = Parse(tc.dsn + "&pgrouted_select=nearest")
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg := parsed.Clone()
			cfg.Hosts = append(cfg.Hosts[:1], cfg.Hosts[2:]...) // drop a host
			cfg.Hosts[1].Name = "second"
			formatted := Format(cfg)
			if !strings.HasPrefix(formatted, "host=") {
				t.Fatalf("Format did not write from the hosts: %s", redactMarker(formatted))
			}
			back, err := Parse(formatted)
			if err != nil {
				t.Fatalf("%v\nformatted: %s", err, redactMarker(formatted))
			}
			if diff := diffConfig(cfg, back); diff != "" {
				t.Errorf("%s\nformatted: %s", diff, redactMarker(formatted))
			}
			checkNoPassword(t, cfg)
		})
	}

	t.Run("from pgx configs", func(t *testing.T) {
		isolateEnv(t, nil)
		var hosts []Host
		for _, h := range []string{"db1", "db2"} {
			cc, err := pgx.ParseConfig("host=" + h + " user=app password=" + marker + " sslmode=disable")
			if err != nil {
				t.Fatal(err)
			}
			hosts = append(hosts, Host{Name: h, Addr: h + ":5432", Weight: 2, ConnConfig: cc})
		}
		cfg := defaultConfig()
		cfg.Hosts = hosts
		cfg.ProbeInterval = 200 * time.Millisecond
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		want := "host=db1,db2 port=5432 user=app password=xxxxx sslmode=disable pgrouted_probe_interval=200ms pgrouted_weights=2,2 pgrouted_names=db1,db2"
		if got := cfg.Redacted(); got != want {
			t.Errorf("Redacted\n got %s\nwant %s", got, want)
		}
		back, err := Parse(Format(cfg))
		if err != nil {
			t.Fatal(err)
		}
		if diff := diffConfig(cfg, back); diff != "" {
			t.Error(diff)
		}
	})

	if Format(nil) != "" {
		t.Error("Format(nil)")
	}
}

// TestRedacted pins the redacted forms.
func TestRedacted(t *testing.T) {
	isolateEnv(t, nil)
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://app:" + marker + "@db1,db2/app?sslmode=disable&pgrouted_max_lag=2s",
			"postgres://app:xxxxx@db1,db2/app?sslmode=disable&pgrouted_max_lag=2s"},
		{"postgres://app:" + marker + "%40x@db1/app?sslpassword=" + marker + "&pass%77ord=" + marker + "&sslmode=disable",
			"postgres://app:xxxxx@db1/app?sslpassword=xxxxx&pass%77ord=xxxxx&sslmode=disable"},
		// Keyword/value syntax is not read again: the string is written
		// afresh from pgx's parse, the password in a place of its own,
		// whatever quotes and escapes it had.
		{"host=db1 user=app password='" + marker + " two' sslmode=disable pgrouted_names=one",
			"host=db1 port=5432 user=app password=xxxxx sslmode=disable pgrouted_names=one"},
		{"host=db1 user=app password = " + marker + `\ two sslmode=disable`,
			"host=db1 port=5432 user=app password=xxxxx sslmode=disable"},
		{"host=db1 user=app password='" + marker + `\' x' sslmode=disable pgrouted_select=random`,
			"host=db1 port=5432 user=app password=xxxxx sslmode=disable pgrouted_select=random"},
		// A password that also names a host is masked there too.
		{"host=" + marker + " user=app password=" + marker + " sslmode=disable",
			"host=xxxxx port=5432 user=app password=xxxxx sslmode=disable"},
		{"postgres://app@db1/app?sslmode=disable", "postgres://app@db1/app?sslmode=disable"},
		// In a URL the password's place is known, whatever its length.
		{"postgres://app:pw@db1/app?sslmode=disable&password=pw&x=pw", "postgres://app:xxxxx@db1/app?sslmode=disable&password=xxxxx&x=pw"},
		{"postgres://app:" + marker + "@db1/app?application_name=a@b&sslmode=disable",
			"postgres://app:xxxxx@db1/app?application_name=a@b&sslmode=disable"},
		// A short password too.
		{"host=db1 user=app password=pw sslmode=disable pgrouted_select=random",
			"host=db1 port=5432 user=app password=xxxxx sslmode=disable pgrouted_select=random"},
	} {
		cfg, err := Parse(tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Redacted(); got != tc.want {
			t.Errorf("Redacted\n got %s\nwant %s", redactMarker(got), tc.want)
		}
		if got := cfg.String(); got != tc.want {
			t.Errorf("String\n got %s\nwant %s", redactMarker(got), tc.want)
		}
		if got := fmt.Sprintf("%v|%+v|%#v|%s", cfg, *cfg, *cfg, cfg); strings.Contains(got, marker) {
			t.Errorf("fmt shows the password: %s", redactMarker(got))
		}
	}
}

// TestErrorsHidePasswordFromEnv: PGPASSWORD is a secret too.
func TestErrorsHidePasswordFromEnv(t *testing.T) {
	isolateEnv(t, map[string]string{"PGPASSWORD": marker})
	_, err := Parse("host=" + marker + "," + marker)
	checkError(t, err, "host xxxxx:5432 is listed twice", "host")
}

// durationTests are parseDuration's table: every form a duration key
// takes (time.ParseDuration's syntax and pgrouted's older forms) and the
// errors. FuzzDuration starts from them.
var durationTests = []struct {
	in   string
	want time.Duration
	err  error // when not nil, the error wanted
}{
	// pgrouted's forms before Go's syntax: ms, s, m, fractions, space.
	{in: "0"}, {in: "0.00"}, {in: "1.5s", want: 1500 * time.Millisecond},
	{in: " 2s ", want: 2 * time.Second}, {in: "2 s", want: 2 * time.Second}, {in: "1750 ms", want: 1750 * time.Millisecond},
	{in: "0.5m", want: 30 * time.Second}, {in: "10ms", want: 10 * time.Millisecond},
	{in: "0.000001ms", want: time.Nanosecond}, {in: "0.0000004ms"}, {in: "0.0000005ms", want: time.Nanosecond},
	{in: "1.0000000001s", want: time.Second}, {in: "007s", want: 7 * time.Second}, {in: "153722867m", want: 153722867 * time.Minute},
	// time.ParseDuration's syntax.
	{in: "250us", want: 250 * time.Microsecond}, {in: "250µs", want: 250 * time.Microsecond}, {in: "250μs", want: 250 * time.Microsecond},
	{in: "100ns", want: 100}, {in: "1h", want: time.Hour}, {in: "1.5h", want: 90 * time.Minute},
	{in: "1m30s", want: 90 * time.Second}, {in: "1h2m3s4ms5us6ns", want: time.Hour + 2*time.Minute + 3*time.Second + 4*time.Millisecond + 5*time.Microsecond + 6},
	{in: "1s500ms", want: 1500 * time.Millisecond}, {in: "1.5m0.5s", want: 90*time.Second + 500*time.Millisecond},
	{in: ".5s", want: 500 * time.Millisecond}, {in: "1.s", want: time.Second}, {in: "+1s", want: time.Second},
	{in: "-0"}, {in: "+0"}, {in: "-0s"}, {in: "2562047h47m16.854775807s", want: math.MaxInt64},
	// A bare number other than 0.
	{in: "1", err: errNoUnit}, {in: "250", err: errNoUnit}, {in: "0.5", err: errNoUnit}, {in: "-5", err: errNoUnit},
	// Below 0.
	{in: "-1s", err: errNegative}, {in: "-1ns", err: errNegative}, {in: "-1m30s", err: errNegative},
	// Beyond an int64 of nanoseconds.
	{in: "9223372036854775807.0ms", err: errRange}, {in: "153722868m", err: errRange},
	{in: "2562047h47m16.854775808s", err: errRange}, {in: "99999999999999999999h", err: errRange},
	// Not a duration.
	{in: "", err: errSyntax}, {in: " ", err: errSyntax}, {in: "-", err: errSyntax}, {in: "s", err: errSyntax},
	{in: ".s", err: errSyntax}, {in: ".", err: errSyntax}, {in: "1e3ms", err: errSyntax}, {in: "1S", err: errSyntax},
	{in: "1d", err: errSyntax}, {in: "1 ms s", err: errSyntax}, {in: "1,5s", err: errSyntax}, {in: "1m30", err: errSyntax},
	{in: "1s 500ms", err: errSyntax}, {in: "1 s500ms", err: errSyntax}, {in: "--1s", err: errSyntax}, {in: "1s-1s", err: errSyntax},
	{in: "1µ", err: errSyntax}, {in: "1 sec", err: errSyntax}, {in: "off", err: errSyntax}, {in: "none", err: errSyntax},
}

func TestDuration(t *testing.T) {
	for _, tc := range durationTests {
		got, err := parseDuration(tc.in)
		if err != tc.err || got != tc.want && err == nil {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, %v", tc.in, got, err, tc.want, tc.err)
		}
		// Where time.ParseDuration reads the value too, it reads the same
		// (the table has nothing below a nanosecond but in the old forms).
		if goD, goErr := time.ParseDuration(tc.in); goErr == nil && err == nil && goD != got && !strings.Contains(tc.in, "0.0000") {
			t.Errorf("parseDuration(%q) = %v, time.ParseDuration %v", tc.in, got, goD)
		}
	}
	for _, d := range []time.Duration{0, 1, 999, time.Microsecond, 1500 * time.Microsecond, time.Millisecond,
		1001 * time.Millisecond, time.Second, 90 * time.Second, time.Hour, 36 * time.Hour, math.MaxInt64} {
		s := formatDuration(d)
		if back, err := parseDuration(s); err != nil || back != d {
			t.Errorf("formatDuration(%d) = %q, which parses to %v, %v", d, s, back, err)
		}
		if back, err := time.ParseDuration(s); err != nil || back != d {
			t.Errorf("formatDuration(%d) = %q, which time.ParseDuration reads as %v, %v", d, s, back, err)
		}
	}
	for d, want := range map[time.Duration]string{0: "0s", 1: "1ns", 1500: "1500ns", 250 * time.Microsecond: "250us",
		1500 * time.Microsecond: "1500us", 90 * time.Second: "90s", 90 * time.Minute: "90m", 24 * time.Hour: "24h", -time.Hour: "-1h"} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// FuzzDuration holds parseDuration to time.ParseDuration: whatever Go reads,
// parseDuration reads to the same value within a nanosecond for each
// number (Go truncates where it rounds), or refuses as below 0 or beyond
// an int64; whatever parseDuration reads that holds no space and is not 0
// written with decimals, Go reads too (Go trims no space).
func FuzzDuration(f *testing.F) {
	for _, tc := range durationTests {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseDuration(s)
		if err == nil && got < 0 {
			t.Fatalf("parseDuration(%q) = %v, below 0", s, got)
		}
		goD, goErr := time.ParseDuration(s)
		numbers := time.Duration(strings.Count(s, ".") + 1)
		switch {
		case goErr == nil && err == nil:
			if diff := got - goD; diff < 0 || diff > numbers {
				t.Fatalf("parseDuration(%q) = %d, time.ParseDuration %d", s, got, goD)
			}
		case goErr == nil && err == errNegative:
			if goD >= 0 {
				t.Fatalf("parseDuration(%q): below 0, time.ParseDuration %v", s, goD)
			}
		case goErr == nil && err == errRange:
			if goD < math.MaxInt64-numbers {
				t.Fatalf("parseDuration(%q): out of range, time.ParseDuration %v", s, goD)
			}
		case goErr == nil:
			t.Fatalf("parseDuration(%q) = %v, time.ParseDuration reads %v", s, err, goD)
		case err == nil && s == strings.TrimSpace(s) && !strings.ContainsAny(s, " \t") && strings.Trim(s, "+-0.") != "":
			t.Fatalf("parseDuration(%q) = %v, time.ParseDuration: %v", s, got, goErr)
		}
	})
}

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0B", 0}, {"4096B", 4096}, {"1KB", 1024}, {"1kB", 1024}, {"512KB", 512 << 10}, {"16MB", 16 << 20},
		{"1GB", 1 << 30}, {"1.5MB", 3 << 19}, {"0.1KB", 102}, {" 2 GB ", 2 << 30}, {"8589934591GB", 8589934591 << 30},
		{"8589934592GB", -1}, {"1", -1}, {"1TB", -1}, {"1b", -1}, {"1mb", -1}, {"B", -1}, {"-1B", -1},
	} {
		got, err := parseSize(tc.in)
		if tc.want < 0 {
			if err == nil {
				t.Errorf("parseSize(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseSize(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, n := range []int64{0, 1, 1023, 1024, 1536, 1 << 20, 5 << 30, math.MaxInt64} {
		if back, err := parseSize(formatSize(n)); err != nil || back != n {
			t.Errorf("formatSize(%d) = %q, which parses to %v, %v", n, formatSize(n), back, err)
		}
	}
}

func TestLagBudget(t *testing.T) {
	var b LagBudget
	if b.IsNone() || b.String() != "" {
		t.Errorf("zero LagBudget (unset): %v", b)
	}
	if n := LagNone(); !n.IsNone() || n.String() != "none" || n == b {
		t.Errorf("LagNone: %v", n)
	}
	if d, ok := LagTime(2 * time.Second).Time(); !ok || d != 2*time.Second {
		t.Error("LagTime")
	}
	if _, ok := LagTime(time.Second).Bytes(); ok {
		t.Error("a time budget is a byte budget")
	}
	if n, ok := LagBytes(16 << 20).Bytes(); !ok || n != 16<<20 || LagBytes(16<<20).String() != "16MB" {
		t.Error("LagBytes")
	}
	for _, in := range []string{"", "none", "2s", "16MB", "1.5KB"} {
		var got LagBudget
		if err := got.UnmarshalText([]byte(in)); err != nil {
			t.Fatal(err)
		}
		text, _ := got.MarshalText()
		var again LagBudget
		if err := again.UnmarshalText(text); err != nil || again != got {
			t.Errorf("%q: %v then %v", in, got, again)
		}
	}
	var bad LagBudget
	checkError(t, bad.UnmarshalText([]byte("soon")), "pgrouted_max_lag (soon) is not a duration", keyMaxLag)
}

func TestNearestKey(t *testing.T) {
	for in, want := range map[string]string{
		"pgrouted_max_lga": keyMaxLag, "pgrouted_maxlag": keyMaxLag, "pgrouted_probe": keyProbeInterval,
		"PGROUTED_STRICT_BOOT": keyStrictBoot, "pgrouted_circuit_failure": keyCircuitFailures,
		"pgrouted_readonly": keyReadOnlyTx, "pgrouted_replica_conns": keyReplicaMaxConns,
		"pgrouted_consistancy": keyConsistency, "pgrouted_" + strings.Repeat("x", 1000): keyMaxLag,
	} {
		if got := nearestKey(in); got != want {
			t.Errorf("nearestKey(%.40q) = %s, want %s", in, got, want)
		}
	}
}

// TestFormatChanged: a parsed Config whose routing settings were changed in
// code formats as the string it was parsed from, then the changed keys,
// which override the string's own; the result parses back to it.
func TestFormatChanged(t *testing.T) {
	for _, tc := range []struct {
		name, dsn string
		change    func(*Config)
		want      string
	}{
		{"kv back to a default", "host=db1 sslmode=disable pgrouted_select=nearest",
			func(c *Config) { c.SelectPolicy = SelectRoundRobin },
			"host=db1 sslmode=disable pgrouted_select=nearest pgrouted_select=round-robin"},
		{"kv unchanged", "host=db1 sslmode=disable pgrouted_select=nearest", func(*Config) {},
			"host=db1 sslmode=disable pgrouted_select=nearest"},
		{"kv trailing backslash", "host=db1 sslmode=disable password=" + marker + `\`,
			func(c *Config) { c.Consistency = ConsistencyEventual },
			"host=db1 sslmode=disable password=" + marker + " pgrouted_consistency=eventual"},
		{"kv escaped trailing backslash", "host=db1 sslmode=disable password=" + marker + `\\`,
			func(c *Config) { c.Consistency = ConsistencyEventual },
			"host=db1 sslmode=disable password=" + marker + `\\ pgrouted_consistency=eventual`},
		{"kv empty last value", "host=db1 sslmode=disable application_name = ", func(c *Config) { c.StrictBoot = true },
			"host=db1 sslmode=disable application_name = '' pgrouted_strict_boot=true"},
		{"kv escaped end as the last value", `host=db1 sslmode=disable application_name=\`, func(c *Config) { c.StrictBoot = true },
			"host=db1 sslmode=disable application_name='' pgrouted_strict_boot=true"},
		{"kv names", "host=db1,db2 sslmode=disable", func(c *Config) { c.Hosts[1].Name = "rack b" },
			"host=db1,db2 sslmode=disable pgrouted_names='db1:5432,rack b'"},
		{"url without query", "postgres://db1,db2/app", func(c *Config) { c.Hosts[0].Name = "a b" },
			"postgres://db1,db2/app?pgrouted_names=a%20b,db2:5432"},
		{"url with query", "postgres://db1/app?sslmode=disable&pgrouted_lease=5s", func(c *Config) { c.Lease = 10 * time.Second },
			"postgres://db1/app?sslmode=disable&pgrouted_lease=5s&pgrouted_lease=10s"},
		{"url empty query", "postgres://db1/app?", func(c *Config) { c.StrictBoot = true },
			"postgres://db1/app?pgrouted_strict_boot=true"},
		{"url query ends with &", "postgres://db1/app?sslmode=disable&", func(c *Config) { c.StrictBoot = true },
			"postgres://db1/app?sslmode=disable&pgrouted_strict_boot=true"},
		{"url query without path", "postgres://db1,[::1]:5433?sslmode=disable", func(c *Config) { c.StrictBoot = true },
			"postgres://db1,[::1]:5433?sslmode=disable&pgrouted_strict_boot=true"},
		{"url ? in the password", "postgres://u:" + marker + "?x@db1/app", func(c *Config) { c.StrictBoot = true },
			"postgres://u:" + marker + "?x@db1/app?pgrouted_strict_boot=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			isolateEnv(t, nil)
			cfg, err := Parse(tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			tc.change(cfg)
			got := Format(cfg)
			if got != tc.want {
				t.Errorf("Format\n got %s\nwant %s", redactMarker(got), redactMarker(tc.want))
			}
			back, err := Parse(got)
			if err != nil {
				t.Fatalf("Parse(Format): %v", err)
			}
			if diff := diffConfig(cfg, back); diff != "" {
				t.Error(diff)
			}
			checkNoPassword(t, cfg)
		})
	}
}

// CheckName refuses what a log, a metric label or a terminal could not
// show as it is, and Printable writes each such byte or character as an
// escape, returning a fit name as it is; pgrouted_names is held to the
// same rule.
func TestCheckNamePrintable(t *testing.T) {
	long := strings.Repeat("n", MaxNameLen+1)
	for _, tc := range []struct {
		name, rule, printed string
	}{
		{"pg-a", "", "pg-a"},
		{"ünïcode 名前", "", "ünïcode 名前"},
		{strings.Repeat("n", MaxNameLen), "", strings.Repeat("n", MaxNameLen)},
		{"", "empty", ""},
		{long, "more than 255", long},
		{"a\x1b[31mred", "control character", `a\u001b[31mred`},
		{"line\nbreak", "control character", `line\u000abreak`},
		{"evil\u202etxt.exe", "format character", `evil\u202etxt.exe`},
		{"a\u2028b", "line or paragraph separator", `a\u2028b`},
		{"bad\xffutf8", "not UTF-8", `bad\xffutf8`},
		{"tag\U000E0041", "format character", `tag\U000e0041`},
	} {
		if got := CheckName(tc.name); (tc.rule == "") != (got == "") || !strings.Contains(got, tc.rule) {
			t.Errorf("CheckName(%q) = %q, want %q", tc.name, got, tc.rule)
		}
		if got := Printable(tc.name); got != tc.printed {
			t.Errorf("Printable(%q) = %q, want %q", tc.name, got, tc.printed)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = Printable("pg-a") }); n != 0 {
		t.Errorf("Printable of a fit name allocates %v times", n)
	}
	_, err := Parse("host=db1 sslmode=disable pgrouted_names=" + long)
	if err == nil || !strings.Contains(err.Error(), "at most 255") {
		t.Fatalf("a pgrouted_names entry of %d bytes: %v, want an error naming the bound", len(long), err)
	}
}
