package pgrouted

import "github.com/pgrouted/pgrouted/topology"

// TopologyHost returns what c's topology last published of the host named
// name (Untrusted included), false when it names none.
func TopologyHost(c *Connector, name string) (topology.HostState, bool) {
	s := c.top.Snapshot()
	if i := s.Index(name); i >= 0 {
		return s.Hosts[i], true
	}
	return topology.HostState{}, false
}
