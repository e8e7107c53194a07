package pgrouted

import "github.com/pgrouted/pgrouted/topology"

// This file says, once per Connector, what the connecting role lacks.
// pgrouted needs no privilege beyond the application's own: PUBLIC may run
// everything its probes, position reads, replica checks and waits run, and
// read the function catalog. Two grants give more (package topology,
// privileges.go): pg_read_all_stats (a standby's current timeline) and
// EXECUTE on pg_read_file(text) (the timeline history). Without them the
// probes go on and the routing stays safe, with more reads on the primary
// after a failover; the first probe that finds one missing says so here,
// and Topology shows it (HostInfo.MissingPrivileges). See
// docs/privileges.md.

// logMissingPrivilege logs the topology's report of a missing grant: one
// line per grant and Connector (the topology sends each once).
func (c *Connector) logMissingPrivilege(e topology.Event) {
	c.log.Warn("pgrouted: the connecting role lacks a privilege; pgrouted works without it, with less",
		"privilege", e.Privilege, "host", e.Host, "effect", e.Err)
}
