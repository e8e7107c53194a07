//go:build unix

package testcluster

// SetForceCopy makes standbys cloned from now on copies of the primary's
// data directory (as without pg_basebackup) when on; the returned function
// puts back the previous setting.
func SetForceCopy(on bool) (undo func()) {
	old := forceCopy
	forceCopy = on
	return func() { forceCopy = old }
}
