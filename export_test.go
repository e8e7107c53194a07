package pgrouted

// Unexported functions that the external tests (package pgrouted_test) use.
var (
	ResultFormats = resultFormats
	NewResultRows = newResultRows
)
