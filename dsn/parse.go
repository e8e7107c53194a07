package dsn

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The pgrouted keys.
const (
	keyConsistency       = "pgrouted_consistency"
	keyMaxLag            = "pgrouted_max_lag"
	keyProbeInterval     = "pgrouted_probe_interval"
	keySelect            = "pgrouted_select"
	keyLatencyWindow     = "pgrouted_latency_window"
	keyWeights           = "pgrouted_weights"
	keyNames             = "pgrouted_names"
	keyFallback          = "pgrouted_fallback"
	keyReadOnlyTx        = "pgrouted_readonly_tx"
	keyPinAfterWrite     = "pgrouted_pin_after_write"
	keyWriteTimeout      = "pgrouted_write_timeout"
	keyLease             = "pgrouted_lease"
	keyReplicaMaxConns   = "pgrouted_replica_max_conns"
	keyCircuitFailures   = "pgrouted_circuit_failures"
	keyCircuitMaxBackoff = "pgrouted_circuit_max_backoff"
	keyStrictBoot        = "pgrouted_strict_boot"
	keyReadFunctions     = "pgrouted_read_functions"
	keyWriteFunctions    = "pgrouted_write_functions"

	keyTopology         = "pgrouted_topology"
	keyPatroniEndpoints = "pgrouted_patroni_endpoints"
	keyPatroniTimeout   = "pgrouted_patroni_timeout"
	keyDiscover         = "pgrouted_discover"
	keyDiscoverMax      = "pgrouted_discover_max"
	keyReplicaWait      = "pgrouted_replica_wait"
	keyPrimaryReadLimit = "pgrouted_primary_read_limit"
)

// The replica pools' pgxpool settings beside pgrouted_replica_max_conns:
// pgrouted_replica_ and the suffix of pgxpool's pool_ key.
const (
	keyReplicaMinConns              = "pgrouted_replica_min_conns"
	keyReplicaMinIdleConns          = "pgrouted_replica_min_idle_conns"
	keyReplicaMaxConnLifetime       = "pgrouted_replica_max_conn_lifetime"
	keyReplicaMaxConnLifetimeJitter = "pgrouted_replica_max_conn_lifetime_jitter"
	keyReplicaMaxConnIdleTime       = "pgrouted_replica_max_conn_idle_time"
	keyReplicaHealthCheckPeriod     = "pgrouted_replica_health_check_period"
)

// pgxpool's own pool_ keys, which pgrouted reads for the primary's
// sessions (the replicas' pools take the pgrouted_replica_ twins above).
const (
	keyPrimaryMaxConns              = "pool_max_conns"
	keyPrimaryMinConns              = "pool_min_conns"
	keyPrimaryMinIdleConns          = "pool_min_idle_conns"
	keyPrimaryMaxConnLifetime       = "pool_max_conn_lifetime"
	keyPrimaryMaxConnLifetimeJitter = "pool_max_conn_lifetime_jitter"
	keyPrimaryMaxConnIdleTime       = "pool_max_conn_idle_time"
	keyPrimaryHealthCheckPeriod     = "pool_health_check_period"
)

// poolPrefix starts pgxpool's keys. pgxpool matches them as written, and
// so does Parse.
const poolPrefix = "pool_"

// isPoolKey reports whether k is one of pgxpool's pool_ keys, known to
// pgrouted or not: none may reach the server.
func isPoolKey(k string) bool { return strings.HasPrefix(k, poolPrefix) }

// keySpec is how one pgrouted key is read, written and checked.
type keySpec struct {
	key string
	// set stores the value in c; it returns the rule the value's syntax
	// breaks, or "".
	set func(c *Config, v string) string
	// get returns c's value in the form set reads.
	get func(c *Config) string
	// check returns the rule c's value breaks, or "". Parse and Validate
	// share it.
	check func(c *Config) string
	// show, when set, returns c's value as an error may show it (no
	// password); else get does.
	show func(c *Config) string
}

// shown is s's value in c as an error may show it.
func (s *keySpec) shown(c *Config) string {
	if s.show != nil {
		return s.show(c)
	}
	return s.get(c)
}

// specs lists the keys in the order Format writes them. pgrouted_weights and
// pgrouted_names belong to the hosts and have no set, get or check.
var specs = []keySpec{
	{key: keyConsistency,
		set: func(c *Config, v string) string { c.Consistency = Consistency(v); return "" },
		get: func(c *Config) string { return string(c.Consistency) },
		check: func(c *Config) string {
			return oneOf(c.Consistency, ConsistencySession, ConsistencyEventual, ConsistencyCausal, ConsistencyGlobal)
		}},
	{key: keyMaxLag,
		set: func(c *Config, v string) string {
			b, err := parseLagBudget(v)
			if err != nil {
				return lagRule(v, err)
			}
			c.MaxLag = b
			return ""
		},
		get:   func(c *Config) string { return c.MaxLag.String() },
		check: checkMaxLag},
	durationSpec(keyProbeInterval, func(c *Config) *time.Duration { return &c.ProbeInterval },
		durationBounds{min: minProbeInterval, max: maxProbeInterval}),
	{key: keySelect,
		set: func(c *Config, v string) string { c.SelectPolicy = SelectPolicy(v); return "" },
		get: func(c *Config) string { return string(c.SelectPolicy) },
		check: func(c *Config) string {
			return oneOf(c.SelectPolicy, SelectRoundRobin, SelectWeighted, SelectLeastInflight, SelectNearest, SelectRandom)
		}},
	{key: keyLatencyWindow,
		set: func(c *Config, v string) string {
			if v == "off" {
				c.LatencyWindow = LatencyWindowOff
				return ""
			}
			d, err := parseDuration(v)
			switch {
			case err == errNegative:
				return durationRule(v, err) + " (off turns the window off)"
			case err != nil:
				return durationRule(v, err) + ", or off"
			}
			c.LatencyWindow = d
			return ""
		},
		get: func(c *Config) string {
			if c.LatencyWindow == LatencyWindowOff {
				return "off"
			}
			return formatDuration(c.LatencyWindow)
		},
		check: func(c *Config) string {
			if c.LatencyWindow == LatencyWindowOff {
				return ""
			}
			if rule := (durationBounds{min: minLatencyWindow, max: maxLatencyWindow}).rule(c.LatencyWindow); rule != "" {
				return rule + " (off turns the window off)"
			}
			return ""
		}},
	{key: keyWeights},
	{key: keyNames},
	{key: keyFallback,
		set: func(c *Config, v string) string { c.Fallback = FallbackPolicy(v); return "" },
		get: func(c *Config) string { return string(c.Fallback) },
		check: func(c *Config) string {
			return oneOf(c.Fallback, FallbackPrimary, FallbackError)
		}},
	{key: keyReadOnlyTx,
		set: func(c *Config, v string) string { c.ReadOnlyTx = ReadOnlyTxRoute(v); return "" },
		get: func(c *Config) string { return string(c.ReadOnlyTx) },
		check: func(c *Config) string {
			return oneOf(c.ReadOnlyTx, ReadOnlyTxReplica, ReadOnlyTxPrimary)
		}},
	durationSpec(keyPinAfterWrite, func(c *Config) *time.Duration { return &c.PinAfterWrite },
		durationBounds{min: minWait, max: maxWait, zero: "off"}),
	{key: keyWriteTimeout,
		set: func(c *Config, v string) string {
			d, err := parseDuration(v)
			if err != nil {
				return durationRule(v, err)
			}
			if d == 0 {
				d = WriteNoWait
			}
			c.WriteTimeout = d
			return ""
		},
		get: func(c *Config) string {
			if c.WriteTimeout == WriteNoWait {
				return "0s"
			}
			return formatDuration(c.WriteTimeout)
		},
		check: func(c *Config) string {
			switch w := c.WriteTimeout; {
			case w == WriteNoWait:
				return ""
			case w < 0:
				return "must not be negative (0 fails a write at once when there is no primary)"
			}
			return durationBounds{min: minWait, max: maxWait, zero: "no wait"}.rule(c.WriteTimeout)
		}},
	durationSpec(keyLease, func(c *Config) *time.Duration { return &c.Lease },
		durationBounds{min: minProbeInterval, max: maxLease}),
	{key: keyReplicaMaxConns,
		set: func(c *Config, v string) string {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 1 || n > maxReplicaMaxConns {
				return ruleReplicaMaxConns + " (leave the key out for the default, 10)"
			}
			c.ReplicaMaxConns = int32(n)
			return ""
		},
		get: func(c *Config) string { return strconv.FormatInt(int64(c.ReplicaMaxConns), 10) },
		check: func(c *Config) string {
			switch n := c.ReplicaMaxConns; {
			case n < 0:
				return "must not be negative (0 means the default, 10)"
			case n > maxReplicaMaxConns:
				return ruleReplicaMaxConns
			}
			return ""
		}},
	countSpec(keyReplicaMinConns, func(c *Config) *int32 { return &c.ReplicaMinConns }, 0, maxReplicaMaxConns),
	countSpec(keyReplicaMinIdleConns, func(c *Config) *int32 { return &c.ReplicaMinIdleConns }, 0, maxReplicaMaxConns),
	durationSpec(keyReplicaMaxConnLifetime, func(c *Config) *time.Duration { return &c.ReplicaMaxConnLifetime },
		durationBounds{min: minConnLifetime, max: maxConnLifetime}),
	durationSpec(keyReplicaMaxConnLifetimeJitter, func(c *Config) *time.Duration { return &c.ReplicaMaxConnLifetimeJitter },
		durationBounds{min: minWait, max: maxConnLifetime, zero: "none"}),
	durationSpec(keyReplicaMaxConnIdleTime, func(c *Config) *time.Duration { return &c.ReplicaMaxConnIdleTime },
		durationBounds{min: minConnLifetime, max: maxConnLifetime}),
	durationSpec(keyReplicaHealthCheckPeriod, func(c *Config) *time.Duration { return &c.ReplicaHealthCheckPeriod },
		durationBounds{min: minHealthCheckPeriod, max: maxHealthCheckPeriod}),
	// pgxpool's keys, for the primary's sessions: the bounds of their
	// pgrouted_replica_ twins, but 0, their default, is no cap and no
	// limit (the primary's sessions had none before these keys).
	{key: keyPrimaryMaxConns,
		set: func(c *Config, v string) string {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 1 || n > maxReplicaMaxConns {
				return ruleReplicaMaxConns + " (leave the key out for no cap)"
			}
			c.PrimaryMaxConns = int32(n)
			return ""
		},
		get: func(c *Config) string { return strconv.FormatInt(int64(c.PrimaryMaxConns), 10) },
		check: func(c *Config) string {
			switch n := c.PrimaryMaxConns; {
			case n < 0:
				return "must not be negative (0 means no cap)"
			case n > maxReplicaMaxConns:
				return ruleReplicaMaxConns
			}
			return ""
		}},
	countSpec(keyPrimaryMinConns, func(c *Config) *int32 { return &c.PrimaryMinConns }, 0, maxReplicaMaxConns),
	countSpec(keyPrimaryMinIdleConns, func(c *Config) *int32 { return &c.PrimaryMinIdleConns }, 0, maxReplicaMaxConns),
	durationSpec(keyPrimaryMaxConnLifetime, func(c *Config) *time.Duration { return &c.PrimaryMaxConnLifetime },
		durationBounds{min: minConnLifetime, max: maxConnLifetime, zero: "none"}),
	durationSpec(keyPrimaryMaxConnLifetimeJitter, func(c *Config) *time.Duration { return &c.PrimaryMaxConnLifetimeJitter },
		durationBounds{min: minWait, max: maxConnLifetime, zero: "none"}),
	durationSpec(keyPrimaryMaxConnIdleTime, func(c *Config) *time.Duration { return &c.PrimaryMaxConnIdleTime },
		durationBounds{min: minConnLifetime, max: maxConnLifetime, zero: "none"}),
	durationSpec(keyPrimaryHealthCheckPeriod, func(c *Config) *time.Duration { return &c.PrimaryHealthCheckPeriod },
		durationBounds{min: minHealthCheckPeriod, max: maxHealthCheckPeriod}),
	{key: keyCircuitFailures,
		set: func(c *Config, v string) string {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return fmt.Sprintf("must be a whole number from 1 to %d", maxCircuitFailures)
			}
			c.CircuitFailures = int(n)
			return ""
		},
		get: func(c *Config) string { return strconv.Itoa(c.CircuitFailures) },
		check: func(c *Config) string {
			return countRule(int64(c.CircuitFailures), 1, maxCircuitFailures)
		}},
	durationSpec(keyCircuitMaxBackoff, func(c *Config) *time.Duration { return &c.CircuitMaxBackoff },
		durationBounds{min: minProbeInterval, max: maxCircuitMaxBackoff}),
	{key: keyStrictBoot,
		set: func(c *Config, v string) string {
			b, err := parseBool(v)
			if err != nil {
				return ruleBool
			}
			c.StrictBoot = b
			return ""
		},
		get:   func(c *Config) string { return strconv.FormatBool(c.StrictBoot) },
		check: func(*Config) string { return "" }},
	funcListSpec(keyReadFunctions, func(c *Config) *[]string { return &c.ReadFunctions }),
	funcListSpec(keyWriteFunctions, func(c *Config) *[]string { return &c.WriteFunctions }),
	// The topology provider's keys.
	{key: keyTopology,
		set: func(c *Config, v string) string { c.Topology = TopologySource(v); return "" },
		get: func(c *Config) string { return string(c.Topology) },
		check: func(c *Config) string {
			return oneOf(c.Topology, TopologyProbe, TopologyPatroni)
		}},
	{key: keyPatroniEndpoints,
		set: func(c *Config, v string) string {
			c.PatroniEndpoints = nil
			if v != "" {
				c.PatroniEndpoints = splitList(v)
			}
			return ""
		},
		get:   func(c *Config) string { return strings.Join(c.PatroniEndpoints, ",") },
		show:  func(c *Config) string { return strings.Join(redactEndpoints(c.PatroniEndpoints), ",") },
		check: checkEndpoints},
	durationSpec(keyPatroniTimeout, func(c *Config) *time.Duration { return &c.PatroniTimeout },
		durationBounds{min: minPatroniTimeout, max: maxPatroniTimeout}),
	{key: keyDiscover,
		set: func(c *Config, v string) string {
			b, err := parseBool(v)
			if err != nil {
				return ruleBool
			}
			c.Discover = b
			return ""
		},
		get:   func(c *Config) string { return strconv.FormatBool(c.Discover) },
		check: func(*Config) string { return "" }},
	{key: keyDiscoverMax,
		set: func(c *Config, v string) string {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return ruleDiscoverMax
			}
			c.DiscoverMax = int(n)
			return ""
		},
		get: func(c *Config) string { return strconv.Itoa(c.DiscoverMax) },
		check: func(c *Config) string {
			if c.DiscoverMax < 1 || c.DiscoverMax > MaxDiscoverMax {
				return ruleDiscoverMax
			}
			return ""
		}},

	durationSpec(keyReplicaWait, func(c *Config) *time.Duration { return &c.ReplicaWait },
		durationBounds{min: minWait, max: maxWait, zero: "off"}),
	{key: keyPrimaryReadLimit,
		set: func(c *Config, v string) string {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return rulePrimaryReadLimit
			}
			c.PrimaryReadLimit = int(n)
			return ""
		},
		get: func(c *Config) string { return strconv.Itoa(c.PrimaryReadLimit) },
		check: func(c *Config) string {
			if c.PrimaryReadLimit < 0 || c.PrimaryReadLimit > MaxPrimaryReadLimit {
				return rulePrimaryReadLimit
			}
			return ""
		}},
}

// funcListSpec is the keySpec of a comma list of function names. Their
// syntax (name, schema.name, "Quoted") is checked where they are read as
// SQL names, by the package that classifies statements; here each entry
// must be non-empty and plain text.
func funcListSpec(key string, field func(*Config) *[]string) keySpec {
	return keySpec{key: key,
		set: func(c *Config, v string) string {
			*field(c) = nil
			if v == "" {
				return ""
			}
			*field(c) = splitList(v)
			return ""
		},
		get: func(c *Config) string { return strings.Join(*field(c), ",") },
		check: func(c *Config) string {
			for i, n := range *field(c) {
				if n == "" {
					return fmt.Sprintf("entry %d is empty", i+1)
				}
				if strings.Contains(n, ",") {
					return fmt.Sprintf("entry %d (%q) must not hold commas", i+1, n)
				}
				if bad := badText(n); bad != "" {
					return fmt.Sprintf("entry %d (%q): %s", i+1, n, bad)
				}
			}
			return ""
		}}
}

// countSpec is the keySpec of a whole number field from min to max.
func countSpec(key string, field func(*Config) *int32, min, max int64) keySpec {
	rule := fmt.Sprintf("must be a whole number from %d to %d", min, max)
	return keySpec{key: key,
		set: func(c *Config, v string) string {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return rule
			}
			*field(c) = int32(n)
			return ""
		},
		get: func(c *Config) string { return strconv.FormatInt(int64(*field(c)), 10) },
		check: func(c *Config) string {
			if n := int64(*field(c)); n < min || n > max {
				return rule
			}
			return ""
		}}
}

// durationSpec is the keySpec of a duration field within bounds.
func durationSpec(key string, field func(*Config) *time.Duration, bounds durationBounds) keySpec {
	return keySpec{key: key,
		set: func(c *Config, v string) string {
			d, err := parseDuration(v)
			if err != nil {
				return durationRule(v, err)
			}
			*field(c) = d
			return ""
		},
		get:   func(c *Config) string { return formatDuration(*field(c)) },
		check: func(c *Config) string { return bounds.rule(*field(c)) }}
}

// checkMaxLag is the rule of pgrouted_max_lag on its own (that a time
// budget exceed pgrouted_probe_interval is checked with both).
func checkMaxLag(c *Config) string {
	switch b := c.MaxLag; {
	case (b.kind == lagTime || b.kind == lagBytes) && b.n <= 0:
		return "must be greater than 0"
	case b.kind == lagTime && b.n > int64(maxLagTime):
		return "must be at most " + formatDuration(maxLagTime) + " (none removes the budget)"
	case b.kind == lagBytes && b.n > maxLagBytes:
		return "must be at most " + formatSize(maxLagBytes) + " (none removes the budget)"
	}
	return ""
}

// durationRule is the rule a duration value v that failed to parse with
// err breaks.
func durationRule(v string, err error) string {
	switch err {
	case errNoUnit:
		return ruleNoUnit(v, "ms")
	case errNegative:
		return ruleNegative
	}
	return ruleDuration
}

// lagRule is the rule a pgrouted_max_lag value v that failed to parse with
// err breaks.
func lagRule(v string, err error) string {
	switch err {
	case errNoUnit:
		return ruleNoUnit(v, "ms", "KB")
	case errNegative:
		return ruleNegative
	}
	return ruleLag
}

// oneOf returns "" when v is one of valid, else the rule that lists them.
func oneOf[T ~string](v T, valid ...T) string {
	if slices.Contains(valid, v) {
		return ""
	}
	list := make([]string, len(valid))
	for i, s := range valid {
		list[i] = string(s)
	}
	return "must be one of " + strings.Join(list, ", ")
}

func lookupSpec(key string) *keySpec {
	if i := specIndex(key); i >= 0 {
		return &specs[i]
	}
	return nil
}

// poolKeyNames returns pgxpool's keys that pgrouted reads, in table order.
func poolKeyNames() []string {
	var out []string
	for _, s := range specs {
		if isPoolKey(s.key) {
			out = append(out, s.key)
		}
	}
	return out
}

// specIndex returns the index of key in specs, or -1.
func specIndex(key string) int {
	for i := range specs {
		if specs[i].key == key {
			return i
		}
	}
	return -1
}

// routingPrefix starts every pgrouted key. It is matched ignoring case, so
// that PGROUTED_MAX_LAG is reported as a misspelt key rather than sent to
// the server as a run-time parameter.
const routingPrefix = "pgrouted_"

func isRoutingKey(k string) bool {
	return len(k) >= len(routingPrefix) && strings.EqualFold(k[:len(routingPrefix)], routingPrefix)
}

// setting is one pgrouted_ key = value, as pgx decoded it.
type setting struct{ key, value string }

// nearestKey returns the valid key that key most likely misspells: the
// first that key begins (pgrouted_probe → pgrouted_probe_interval), else
// the nearest by edit distance, the first in table order on a tie.
func nearestKey(key string) string {
	k := strings.ToLower(key)
	if len(k) > len(routingPrefix) {
		for _, s := range specs {
			if strings.HasPrefix(s.key, k) {
				return s.key
			}
		}
	}
	if len(k) > 64 {
		k = k[:64] // longer than any key: the distance is dominated by length
	}
	best, bestDist := "", -1
	for _, s := range specs {
		if d := editDistance(k, s.key); bestDist < 0 || d < bestDist {
			best, bestDist = s.key, d
		}
	}
	return best
}

// Parse parses a connection string in either form pgx accepts, URL
// (postgres://u:p@h1:5432,h2:5433,[::1]:5434/db?...) or keyword/value
// (host=h1,h2 port=5432,5433 dbname=db ...), with the pgrouted_ keys among
// its parameters.
//
// pgx's [pgx.ParseConfig] parses the whole string, so per-host ports, unix
// socket directories, PG* environment variables, the passfile, the service
// file, sslmode and the TLS files for every host, connect_timeout,
// application_name and runtime parameters all mean what they mean to pgx
// and libpq. pgx keeps the keys it does not know as run-time parameters;
// Parse takes every pgrouted_ key out of them (as pgxpool takes out its
// pool_ keys; and pgxpool's pool_ keys listed below, which set the
// primary's sessions as the pgrouted_replica_ keys set the replicas'
// pools; another pool_ key is an error), so pgrouted_ keys found in a service file apply where the
// connection string does not set them, and like libpq the last of a
// repeated key wins. When several keys are wrong, the error is about an
// unknown key first, then about the first key in the order of the table
// below.
//
// The keys, their values and defaults:
//
//	pgrouted_consistency          session | eventual | causal | global     session
//	pgrouted_max_lag              a duration or a size (4096B, 512KB,      30s (3 probe intervals
//	                              16MB, 1GB; KB = 1024 B), or none         when those are longer)
//	pgrouted_probe_interval       duration                                 1s
//	pgrouted_select               round-robin | weighted | least-inflight  round-robin
//	                              | nearest | random
//	pgrouted_latency_window       duration, or off                         20ms, relative
//	pgrouted_weights              comma list, one per host                 1 each
//	pgrouted_names                comma list, one per host                 host:port
//	pgrouted_fallback             primary | error                          primary
//	pgrouted_readonly_tx          replica | primary                        replica
//	pgrouted_pin_after_write      duration, 0 is off                       0
//	pgrouted_write_timeout        duration, 0 fails at once                30s
//	pgrouted_lease                duration                                 10s
//	pgrouted_replica_max_conns    whole number, per replica                10
//	pgrouted_replica_min_conns    whole number, per replica                0
//	pgrouted_replica_min_idle_conns  whole number, per replica             0
//	pgrouted_replica_max_conn_lifetime         duration                   1h
//	pgrouted_replica_max_conn_lifetime_jitter  duration, 0 is none        0
//	pgrouted_replica_max_conn_idle_time        duration                   30m
//	pgrouted_replica_health_check_period       duration                   1m
//	pool_max_conns                whole number, the primary's sessions     no cap
//	pool_min_conns                whole number, the primary's sessions     0
//	pool_min_idle_conns           whole number, the primary's sessions     0
//	pool_max_conn_lifetime        duration, 0 is none                      0 (none)
//	pool_max_conn_lifetime_jitter duration, 0 is none                      0
//	pool_max_conn_idle_time       duration, 0 is none                      0 (none)
//	pool_health_check_period      duration                                 1m
//	pgrouted_circuit_failures     whole number                             2
//	pgrouted_circuit_max_backoff  duration                                 30s (the probe interval
//	                                                                       when that is longer)
//	pgrouted_strict_boot          true | false                             false
//	pgrouted_read_functions       comma list of function names             none
//	pgrouted_write_functions      comma list of function names             none
//	pgrouted_topology             probe | patroni                          probe
//	pgrouted_patroni_endpoints    comma list of http(s) URLs               none (required with patroni)
//	pgrouted_patroni_timeout      duration                                 2s
//	pgrouted_discover             true | false                             false
//	pgrouted_discover_max         whole number, 1 to 256                   16
//	pgrouted_replica_wait         duration, 0 is off                       0
//	pgrouted_primary_read_limit   whole number, 0 is no limit              0
//
// Every duration, count and size has a minimum and a maximum, both
// allowed; a value outside is an error that names the key, the value and
// the bound ("pgrouted_probe_interval (1ms) must be at least 10ms"):
//
//	pgrouted_max_lag              time: more than pgrouted_probe_interval, at most 24h;
//	                              size: 1B to 1024GB
//	pgrouted_probe_interval       10ms to 1h
//	pgrouted_latency_window       100us to 10s, or off
//	pgrouted_weights              1 to 1000000 each
//	pgrouted_pin_after_write      0, or 1ms to 1h
//	pgrouted_write_timeout        0, or 1ms to 1h
//	pgrouted_lease                more than pgrouted_probe_interval, at most 2h
//	pgrouted_replica_max_conns    1 to 10000
//	pgrouted_replica_min_conns, pgrouted_replica_min_idle_conns
//	                              0 to pgrouted_replica_max_conns
//	pgrouted_replica_max_conn_lifetime, pgrouted_replica_max_conn_idle_time
//	                              1s to 24h
//	pgrouted_replica_max_conn_lifetime_jitter
//	                              0, or 1ms to 24h
//	pgrouted_replica_health_check_period
//	                              100ms to 1h
//	pool_max_conns                1 to 10000
//	pool_min_conns, pool_min_idle_conns
//	                              0 to pool_max_conns (10000 without it)
//	pool_max_conn_lifetime, pool_max_conn_idle_time
//	                              0, or 1s to 24h
//	pool_max_conn_lifetime_jitter 0, or 1ms to 24h
//	pool_health_check_period      100ms to 1h
//	pgrouted_circuit_failures     1 to 1000
//	pgrouted_circuit_max_backoff  pgrouted_probe_interval (at least 10ms) to 1h
//	pgrouted_patroni_timeout      10ms to 1m, and less than pgrouted_lease
//	pgrouted_replica_wait         0, or 1ms to 1h
//	pgrouted_primary_read_limit   0 (no limit), or 1 to 10000
//
// The bounds keep a mistyped or hostile connection string from turning
// pgrouted against the cluster (probes back to back against every host,
// an open circuit probed without pause) or against the application
// (waits of centuries, pools of billions of connections). Names
// (pgrouted_names, and the hosts' names and socket paths, which name a
// host when pgrouted_names does not) are shown in logs, metrics and
// terminals: they must be valid UTF-8 without control, format (U+202E
// RIGHT-TO-LEFT OVERRIDE) or line separator characters; so must the
// function names, and the host, path and user of each Patroni endpoint.
//
// A duration is written as [time.ParseDuration] reads it: numbers, each
// with a unit of ns, us (or µs), ms, s, m or h, fractions allowed (250us,
// 1.5s, 1m30s, 1h); also a lone number with space before its unit (2 s).
// Every duration key reads it with one parser, which rounds to the
// nanosecond; a value below 0 is an error. A size is a number with the
// unit B, KB, MB or GB, 1024-based, fractions allowed. A number without a
// unit is an error that names the fix (pgrouted_max_lag (500) has no unit:
// add one, e.g. 500ms ...), but for 0: unlike libpq's connect_timeout=30
// (seconds), nothing here has a unit to assume. [Format] writes a
// duration in the largest unit that holds it exactly (90s, 2h, 250us).
//
// The defaults are explained where they are declared: [DefaultMaxLag],
// [DefaultReplicaMaxConns], [DefaultLatencyWindow] with
// [Config.LatencyWindow]. pgrouted_max_lag's default is a time budget of
// 30s, or of three probe intervals when pgrouted_probe_interval is longer
// than 10s. The latency window is relative: a replica stays inside while
// its round trip is at most the fastest's plus the larger of the window
// and the fastest's own round trip.
//
// Beyond each key's own range: a time budget in pgrouted_max_lag and
// pgrouted_lease must be greater than pgrouted_probe_interval; the lists
// pgrouted_weights and pgrouted_names need one entry per host; names are
// non-empty, unique and not "primary"; a host may not be listed twice.
// target_session_attrs other than any is rejected: pgrouted finds the
// primary and the replicas itself, and pgx's check would refuse the
// connections to one or the other.
//
// A connection string that names no host, with no PGHOST either, means what
// it means to pgx and libpq: the local default (a unix socket directory if
// one exists, else localhost).
//
// The error is a [*ParseError]. The Config returned has passed
// [Config.Validate].
func Parse(connString string) (*Config, error) {
	sec := envSecrets()
	cc, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, newError(sec, "", pgxDetail(err), err)
	}
	sec.add(cc.Password)

	// pgx keeps every key it does not know as a run-time parameter, whether
	// the connection string or the service file gave it (the connection
	// string's winning, and the last of a repeated key). Lift ours out, as
	// pgxpool lifts its pool_ keys, so that none reaches the server.
	routing := make([]setting, 0, len(cc.RuntimeParams))
	for k, v := range cc.RuntimeParams {
		if isRoutingKey(k) || (isPoolKey(k) && lookupSpec(k) != nil) {
			delete(cc.RuntimeParams, k)
			routing = append(routing, setting{k, v})
		}
	}
	// The map has no order: check unknown keys first, by name, then the
	// known ones in table order, so that the error is always the same one.
	slices.SortFunc(routing, func(a, b setting) int {
		ia, ib := specIndex(a.key), specIndex(b.key)
		if ia != ib {
			return ia - ib
		}
		return strings.Compare(a.key, b.key)
	})

	// pgxpool's own keys are not PostgreSQL's: pgx would send them to the
	// server as run-time parameters, which it refuses at connect. The
	// ones pgrouted reads were lifted out with its own; the others are
	// refused.
	poolKeys := make([]string, 0, 1)
	for k := range cc.RuntimeParams {
		if isPoolKey(k) {
			poolKeys = append(poolKeys, k)
		}
	}
	if len(poolKeys) > 0 {
		slices.Sort(poolKeys)
		k := poolKeys[0]
		return nil, newError(sec, k, fmt.Sprintf(
			"%s is not a pgxpool setting pgrouted takes (it takes %s), nor a PostgreSQL one", k, strings.Join(poolKeyNames(), ", ")), nil)
	}

	if cc.ValidateConnect != nil {
		return nil, newError(sec, "target_session_attrs", fmt.Sprintf(
			"target_session_attrs%s must be any or left out: pgrouted finds the primary and the replicas itself, and this check would refuse connections to one or the other",
			targetSessionAttrs(cc.ValidateConnect)), nil)
	}

	cfg := &Config{} // zero fields get their defaults once the keys are read
	var names, weights *setting
	for i, s := range routing {
		spec := lookupSpec(s.key)
		switch {
		case spec == nil:
			return nil, newError(sec, s.key, fmt.Sprintf("unknown key %s (did you mean %s?)", s.key, nearestKey(s.key)), nil)
		case s.key == keyNames:
			names = &routing[i]
			continue
		case s.key == keyWeights:
			weights = &routing[i]
			continue
		}
		v := strings.TrimSpace(s.value)
		rule := spec.set(cfg, v)
		if rule == "" {
			rule = spec.check(cfg)
		}
		if rule != "" {
			shown := s.value
			if spec.show != nil {
				shown = spec.shown(cfg)
			}
			return nil, newError(sec, s.key, fmt.Sprintf("%s (%s) %s", s.key, shown, rule), nil)
		}
	}

	cfg.Hosts = splitHosts(cc)
	if names != nil {
		list := splitList(names.value)
		if len(list) != len(cfg.Hosts) {
			return nil, newError(sec, keyNames, countMismatch(keyNames, names.value, len(list), len(cfg.Hosts)), nil)
		}
		for i := range cfg.Hosts {
			if list[i] == "" {
				// Not left to SetDefaults: an empty entry is a mistake.
				return nil, newError(sec, keyNames, fmt.Sprintf("%s (%s): entry %d is empty; a name must not be", keyNames, names.value, i+1), nil)
			}
			cfg.Hosts[i].Name = list[i]
		}
	}
	if weights != nil {
		list := splitList(weights.value)
		if len(list) != len(cfg.Hosts) {
			return nil, newError(sec, keyWeights, countMismatch(keyWeights, weights.value, len(list), len(cfg.Hosts)), nil)
		}
		for i, w := range list {
			n, err := strconv.Atoi(w)
			if err != nil || n < 1 || n > MaxWeight {
				return nil, newError(sec, keyWeights, fmt.Sprintf("%s (%s): entry %d (%s) %s", keyWeights, weights.value, i+1, w, ruleWeight), nil)
			}
			cfg.Hosts[i].Weight = n
		}
	}

	cfg.SetDefaults()
	if err := cfg.validate(sec); err != nil {
		return nil, err
	}
	src := &source{raw: connString, parsed: *cfg}
	src.parsed.Hosts = make([]Host, len(cfg.Hosts))
	for i, h := range cfg.Hosts {
		src.parsed.Hosts[i] = Host{Name: h.Name, Addr: h.Addr, Weight: h.Weight}
	}
	cfg.src = src
	return cfg, nil
}

const ruleWeight = "must be a whole number from 1 to 1000000"

var ruleReplicaMaxConns = fmt.Sprintf("must be a whole number from 1 to %d", maxReplicaMaxConns)

func countMismatch(key, value string, n, hosts int) string {
	return fmt.Sprintf("%s (%s) has %d entries for %d hosts: it needs one entry per host, in host order", key, value, n, hosts)
}

// splitList splits a comma list and trims each entry.
func splitList(v string) []string {
	list := strings.Split(v, ",")
	for i := range list {
		list[i] = strings.TrimSpace(list[i])
	}
	return list
}

// targetSessionAttrs returns " (value)" for the check pgx made of a
// target_session_attrs value, or "" for one it does not know.
func targetSessionAttrs(check pgconn.ValidateConnectFunc) string {
	p := reflect.ValueOf(check).Pointer()
	for _, v := range []struct {
		value string
		check pgconn.ValidateConnectFunc
	}{
		{"read-write", pgconn.ValidateConnectTargetSessionAttrsReadWrite},
		{"read-only", pgconn.ValidateConnectTargetSessionAttrsReadOnly},
		{"primary", pgconn.ValidateConnectTargetSessionAttrsPrimary},
		{"standby", pgconn.ValidateConnectTargetSessionAttrsStandby},
		{"prefer-standby", pgconn.ValidateConnectTargetSessionAttrsPreferStandby},
	} {
		if reflect.ValueOf(v.check).Pointer() == p {
			return " (" + v.value + ")"
		}
	}
	return ""
}

// splitHosts turns pgx's one configuration for all hosts into one for each
// host. pgx lists every connection attempt, host by host, in Host/Port/
// TLSConfig and then Fallbacks; a host has one attempt, or two (same host and
// port, one with TLS and one without) under sslmode=prefer or allow.
func splitHosts(cc *pgx.ConnConfig) []Host {
	n := 1 + len(cc.Fallbacks)
	attempt := func(c *pgx.ConnConfig, i int) *pgconn.FallbackConfig {
		if i == 0 {
			return &pgconn.FallbackConfig{Host: c.Host, Port: c.Port, TLSConfig: c.TLSConfig}
		}
		return c.Fallbacks[i-1]
	}
	var hosts []Host
	for i := 0; i < n; {
		first := attempt(cc, i)
		size := 1
		if i+1 < n {
			next := attempt(cc, i+1)
			if next.Host == first.Host && next.Port == first.Port && (next.TLSConfig == nil) != (first.TLSConfig == nil) {
				size = 2
			}
		}
		hc := cc.Copy() // TLS configurations cloned: no sharing between hosts
		mine := attempt(hc, i)
		fallbacks := []*pgconn.FallbackConfig{} // empty, not nil, as pgx leaves it
		if size == 2 {
			fallbacks = append(fallbacks, attempt(hc, i+1))
		}
		hc.Host, hc.Port, hc.TLSConfig = mine.Host, mine.Port, mine.TLSConfig
		hc.Fallbacks = fallbacks
		_, addr := pgconn.NetworkAddress(hc.Host, hc.Port)
		hosts = append(hosts, Host{Name: addr, Addr: addr, Weight: DefaultWeight, ConnConfig: hc})
		i += size
	}
	return hosts
}
