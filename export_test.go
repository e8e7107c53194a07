package pgrouted

// ProbeNow asks c's topology for an immediate probe of host i (in the
// DSN's order).
func ProbeNow(c *Connector, i int) { c.top.ProbeNow(i) }
