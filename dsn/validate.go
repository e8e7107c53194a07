package dsn

import (
	"fmt"
	"strconv"
	"strings"
)

// Validate checks c as [Parse] checks a parsed connection string, so that a
// Config built or changed in code is held to the same rules: at least one
// host, each with an address and a ConnConfig, none repeated; addresses
// and names valid UTF-8 without control, format or line separator
// characters; names unique, not "primary"; weights from 1 to [MaxWeight];
// every routing setting inside its bounds (listed in the documentation of
// [Parse]); a time budget in MaxLag and the Lease greater than the
// ProbeInterval, the CircuitMaxBackoff at least the ProbeInterval,
// ReplicaMinConns and ReplicaMinIdleConns at most ReplicaMaxConns,
// PrimaryMinConns and PrimaryMinIdleConns at most PrimaryMaxConns when that
// is set. A zero
// field is checked as its default (see
// [Config.SetDefaults]); c is not changed. The error is a [*ParseError]
// naming the key of the first rule broken.
func (c *Config) Validate() error {
	sec := envSecrets()
	for _, h := range c.Hosts {
		if h.ConnConfig != nil {
			sec.add(h.ConnConfig.Password)
		}
	}
	if err := c.withDefaults().validate(sec); err != nil {
		return err
	}
	return nil
}

// validate is Validate, on a Config whose defaults are set, with the
// secrets to keep out of the error text.
func (c *Config) validate(sec secrets) *ParseError {
	fail := func(key, format string, args ...any) *ParseError {
		return newError(sec, key, fmt.Sprintf(format, args...), nil)
	}
	if len(c.Hosts) == 0 {
		return fail("host", "no host: host must name at least one server")
	}
	seen := make(map[string]int, len(c.Hosts))
	names := make([]string, len(c.Hosts))
	weights := make([]string, len(c.Hosts))
	for i, h := range c.Hosts {
		names[i] = h.Name
		weights[i] = strconv.Itoa(h.Weight)
		if h.Addr == "" {
			return fail("host", "host %d has no address", i+1)
		}
		if bad := badText(h.Addr); bad != "" {
			return fail("host", "host %d (%q): %s; a host name or socket path must be UTF-8 without control or format characters", i+1, h.Addr, bad)
		}
		if h.ConnConfig == nil {
			return fail("host", "host %s has no ConnConfig", h.Addr)
		}
		if bad := badText(h.ConnConfig.Host); bad != "" {
			return fail("host", "host %d (%q): %s; a host name or socket path must be UTF-8 without control or format characters", i+1, h.ConnConfig.Host, bad)
		}
		k := strings.ToLower(h.Addr)
		if j, ok := seen[k]; ok {
			return fail("host", "host %s is listed twice (hosts %d and %d): each host may appear once", h.Addr, j+1, i+1)
		}
		seen[k] = i
	}

	nameList := strings.Join(names, ",")
	seen = make(map[string]int, len(names))
	for i, n := range names {
		switch {
		case n == "":
			return fail(keyNames, "%s (%s): entry %d is empty; a name must not be", keyNames, nameList, i+1)
		case badText(n) != "":
			return fail(keyNames, "%s (%s): entry %d (%q): %s; a name must be UTF-8 without control or format characters", keyNames, nameList, i+1, n, badText(n))
		case len(n) > MaxNameLen:
			return fail(keyNames, "%s: entry %d is %d bytes long; a name may have at most %d", keyNames, i+1, len(n), MaxNameLen)
		case n != strings.TrimSpace(n) || strings.Contains(n, ","):
			return fail(keyNames, "%s (%s): entry %d (%q) must not hold commas or surrounding space", keyNames, nameList, i+1, n)
		case strings.EqualFold(n, "primary"):
			return fail(keyNames, "%s (%s): entry %d: the name primary is reserved", keyNames, nameList, i+1)
		}
		k := strings.ToLower(n)
		if j, ok := seen[k]; ok {
			return fail(keyNames, "%s (%s): entries %d and %d are both %s; names must be unique", keyNames, nameList, j+1, i+1, n)
		}
		seen[k] = i
	}
	for i, h := range c.Hosts {
		if h.Weight < 1 || h.Weight > MaxWeight {
			return fail(keyWeights, "%s (%s): entry %d (%d) %s", keyWeights, strings.Join(weights, ","), i+1, h.Weight, ruleWeight)
		}
	}

	// The probe interval first: the defaults of pgrouted_max_lag and
	// pgrouted_circuit_max_backoff follow it, and an error about one of
	// them would not name the key that was set.
	probe := lookupSpec(keyProbeInterval)
	if rule := probe.check(c); rule != "" {
		return fail(probe.key, "%s (%s) %s", probe.key, probe.shown(c), rule)
	}
	for _, s := range specs {
		if s.check == nil {
			continue
		}
		if rule := s.check(c); rule != "" {
			return fail(s.key, "%s (%s) %s", s.key, s.shown(c), rule)
		}
	}
	for _, n := range []struct {
		key string
		n   int32
	}{{keyReplicaMinConns, c.ReplicaMinConns}, {keyReplicaMinIdleConns, c.ReplicaMinIdleConns}} {
		if n.n > c.ReplicaMaxConns {
			return fail(n.key, "%s (%d) must be at most %s (%d): a pool holds no more than that", n.key, n.n, keyReplicaMaxConns, c.ReplicaMaxConns)
		}
	}
	if c.PrimaryMaxConns > 0 {
		for _, n := range []struct {
			key string
			n   int32
		}{{keyPrimaryMinConns, c.PrimaryMinConns}, {keyPrimaryMinIdleConns, c.PrimaryMinIdleConns}} {
			if n.n > c.PrimaryMaxConns {
				return fail(n.key, "%s (%d) must be at most %s (%d): no more primary sessions are opened", n.key, n.n, keyPrimaryMaxConns, c.PrimaryMaxConns)
			}
		}
	}
	if d, ok := c.MaxLag.Time(); ok && d <= c.ProbeInterval {
		return fail(keyMaxLag, "%s (%s) must be greater than %s (%s): a replica's lag is only known to within one probe interval",
			keyMaxLag, formatDuration(d), keyProbeInterval, formatDuration(c.ProbeInterval))
	}
	switch {
	case c.Topology == TopologyPatroni && len(c.PatroniEndpoints) == 0:
		return fail(keyPatroniEndpoints, "%s is required with %s=patroni: a comma list of Patroni REST URLs (http://pg-a:8008,http://pg-b:8008)", keyPatroniEndpoints, keyTopology)
	case c.Topology != TopologyPatroni && len(c.PatroniEndpoints) > 0:
		return fail(keyPatroniEndpoints, "%s is set but %s is %s: set %s=patroni to follow Patroni", keyPatroniEndpoints, keyTopology, c.Topology, keyTopology)
	case c.Topology == TopologyPatroni && c.PatroniTimeout >= c.Lease:
		return fail(keyPatroniTimeout, "%s (%s) must be less than %s (%s): an answer slower than the lease could never keep a primary",
			keyPatroniTimeout, formatDuration(c.PatroniTimeout), keyLease, formatDuration(c.Lease))
	}
	if c.CircuitMaxBackoff < c.ProbeInterval {
		return fail(keyCircuitMaxBackoff, "%s (%s) must be at least %s (%s): an open circuit is not probed more often than a healthy host",
			keyCircuitMaxBackoff, formatDuration(c.CircuitMaxBackoff), keyProbeInterval, formatDuration(c.ProbeInterval))
	}
	if c.Lease <= c.ProbeInterval {
		return fail(keyLease, "%s (%s) must be greater than %s (%s): a primary must be probed again before its lease runs out",
			keyLease, formatDuration(c.Lease), keyProbeInterval, formatDuration(c.ProbeInterval))
	}
	return nil
}
