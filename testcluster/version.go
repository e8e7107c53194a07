//go:build unix

package testcluster

import "fmt"

// This file holds what testcluster does differently from one PostgreSQL
// major version to another (13 and later run; see "PostgreSQL versions" in
// the package documentation).

// checkMajor fails when the binaries are older than MinMajor or, when they
// were found by FindBinDir (found), of another major version than
// $PGROUTED_PG_MAJOR asks for.
func (c *Cluster) checkMajor(found bool) error {
	major := c.Major()
	if major < MinMajor {
		return fmt.Errorf("testcluster: %s in %s is older than PostgreSQL %d, the oldest testcluster runs", c.verStr, c.bin, MinMajor)
	}
	if !found {
		return nil
	}
	want, err := wantMajor()
	if err != nil {
		return err
	}
	if want != 0 && want != major {
		return fmt.Errorf("testcluster: %s=%d, but the binaries in %s are %s (set %s to a directory of PostgreSQL %d, or unset it)",
			EnvMajor, want, c.bin, c.verStr, EnvBinDir, want)
	}
	return nil
}

// backupSQL returns the statements that start and stop a non-exclusive
// base backup (Node.copyFrom): pg_backup_start and pg_backup_stop from
// PostgreSQL 15, pg_start_backup and pg_stop_backup with exclusive = false
// before. The start takes the backup's label as $1 and checkpoints at
// once; the stop does not wait for WAL archiving (there is none) and
// returns the backup_label and tablespace_map files' contents.
func backupSQL(major int) (start, stop string) {
	if major >= 15 {
		return "SELECT pg_backup_start($1, true)",
			"SELECT labelfile, coalesce(spcmapfile, '') FROM pg_backup_stop(false)"
	}
	return "SELECT pg_start_backup($1, true, false)",
		"SELECT labelfile, coalesce(spcmapfile, '') FROM pg_stop_backup(false, false)"
}

// pauseStateSQL reads a standby's replay pause state as 'paused' or 'not
// paused'. PostgreSQL 14 added pg_get_wal_replay_pause_state(), which tells
// a requested pause ('pause requested') from replay that has stopped;
// before, pg_is_wal_replay_paused() reports the request, after which the
// startup process applies no record it has not begun (it checks the
// request before each).
func pauseStateSQL(major int) string {
	if major >= 14 {
		return "SELECT pg_get_wal_replay_pause_state()"
	}
	return "SELECT CASE WHEN pg_is_wal_replay_paused() THEN 'paused' ELSE 'not paused' END"
}
