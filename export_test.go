package pgrouted

// Unexported functions that the external tests (package pgrouted_test) use.
var (
	ResultFormats = resultFormats
	NewResultRows = newResultRows
)

// ProbeNow asks c's topology for an immediate probe of host i (in the
// DSN's order).
func ProbeNow(c *Connector, i int) { c.top.ProbeNow(i) }
