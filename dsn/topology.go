package dsn

import (
	"fmt"
	"net/url"
	"slices"
	"time"
)

// TopologySource is where the authority on the primary comes from
// (pgrouted_topology).
type TopologySource string

// The values of pgrouted_topology.
const (
	// TopologyProbe: the probes of pg_is_in_recovery() on the hosts alone.
	TopologyProbe TopologySource = "probe"
	// TopologyPatroni: Patroni's REST API (pgrouted_patroni_endpoints) names
	// the leader; the probes still check it.
	TopologyPatroni TopologySource = "patroni"
)

// The defaults of the topology keys (see the other defaults in config.go).
const (
	// DefaultTopology is the default of pgrouted_topology.
	DefaultTopology = TopologyProbe
	// DefaultPatroniTimeout is the default of pgrouted_patroni_timeout.
	DefaultPatroniTimeout = 2 * time.Second
	// DefaultDiscover is the default of pgrouted_discover.
	DefaultDiscover = false
	// DefaultDiscoverMax is the default of pgrouted_discover_max.
	DefaultDiscoverMax = 16
	// MaxDiscoverMax is the largest pgrouted_discover_max: each
	// discovered host has a prober and a pool.
	MaxDiscoverMax = 256
)

// ruleDiscoverMax is pgrouted_discover_max's rule.
var ruleDiscoverMax = fmt.Sprintf("must be a whole number from 1 to %d (leave the key out for the default, %d)", MaxDiscoverMax, DefaultDiscoverMax)

// checkEndpoints is the rule of pgrouted_patroni_endpoints: each entry an
// http or https URL with a host and no query, UTF-8 without control or
// format characters (the metrics and the topology show it). Its message
// never shows a password.
func checkEndpoints(c *Config) string {
	for i, e := range c.PatroniEndpoints {
		u, err := url.Parse(e)
		switch {
		case e == "":
			return fmt.Sprintf("entry %d is empty", i+1)
		case err != nil:
			return fmt.Sprintf("entry %d is not a URL (expected http://host:port)", i+1)
		case badText(u.Host) != "":
			return fmt.Sprintf("entry %d (%s): in the host, %s", i+1, u.Redacted(), badText(u.Host))
		case badText(u.Path) != "":
			return fmt.Sprintf("entry %d (%s): in the path, %s", i+1, u.Redacted(), badText(u.Path))
		case badText(u.User.Username()) != "":
			return fmt.Sprintf("entry %d (%s): in the user name, %s", i+1, u.Redacted(), badText(u.User.Username()))
		case u.Scheme != "http" && u.Scheme != "https":
			return fmt.Sprintf("entry %d (%s) must be an http or https URL", i+1, u.Redacted())
		case u.Host == "":
			return fmt.Sprintf("entry %d (%s) has no host", i+1, u.Redacted())
		case u.RawQuery != "" || u.Fragment != "":
			return fmt.Sprintf("entry %d (%s) must have no query or fragment", i+1, u.Redacted())
		}
	}
	return ""
}

// redactEndpoints returns the endpoints with their passwords masked; an
// entry that is not a URL is masked whole.
func redactEndpoints(list []string) []string {
	out := make([]string, len(list))
	for i, e := range list {
		u, err := url.Parse(e)
		switch {
		case err != nil:
			out[i] = mask
		default:
			out[i] = u.Redacted()
		}
	}
	return out
}

// endpointPasswords reports whether a Patroni endpoint of c, or of the
// string it was parsed from, may carry a password: its URL has one, or is
// no URL at all.
func endpointPasswords(c *Config) bool {
	var all []string
	all = append(all, c.PatroniEndpoints...)
	if c.src != nil {
		all = append(all, c.src.parsed.PatroniEndpoints...)
	}
	return slices.ContainsFunc(all, func(e string) bool {
		u, err := url.Parse(e)
		if err != nil {
			return true
		}
		_, has := u.User.Password()
		return has
	})
}
