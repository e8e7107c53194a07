package topology

import (
	"errors"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"
)

// The grants the probes can use beyond what PostgreSQL gives every role
// (PUBLIC may execute pg_is_in_recovery(), the WAL position functions,
// pg_control_checkpoint(), pg_control_system() and pg_control_init(), and
// read pg_stat_replication's and pg_stat_wal_receiver's rows). A role
// without them is probed all the same; what it loses is told once, by an
// [EventPrivilegeMissing], and in [HostState].Missing.
const (
	// GrantReadAllStats is membership in pg_read_all_stats (pg_monitor
	// includes it). Without it pg_stat_wal_receiver and pg_stat_replication
	// show their rows without details: a standby's timeline is then its
	// last restartpoint's (pg_control_checkpoint()), which lags a switch
	// of timeline until the standby's next restartpoint, and the
	// standbys' sync states are unknown.
	GrantReadAllStats = "pg_read_all_stats"

	// GrantReadFile is EXECUTE on pg_read_file(text), revoked from PUBLIC
	// by default (membership in pg_read_server_files does not give it).
	// Without it the timeline history file of a promoted primary cannot
	// be read: where the new timeline left the old one is known only as
	// a lower bound ([HostState].SwitchFloor).
	GrantReadFile = "EXECUTE ON FUNCTION pg_read_file(text)"
)

// probePrivilegesSQL tells whether the probing role has the grants above.
// Both functions are PUBLIC, and true for a superuser.
const probePrivilegesSQL = `SELECT pg_has_role('pg_read_all_stats', 'USAGE'), has_function_privilege('pg_catalog.pg_read_file(text)', 'EXECUTE')`

// PrivilegeEffect says what a probing role without grant loses, for the
// grants above; for another (a function PUBLIC may no longer execute) it
// says that what the probe read with it is unknown.
func PrivilegeEffect(grant string) string {
	switch grant {
	case GrantReadAllStats:
		return "a standby's timeline is its last restartpoint's: after a failover, reads that must see a write made on the new timeline go to the primary until each standby's next restartpoint (checkpoint_timeout); the standbys' sync states are not known"
	case GrantReadFile:
		return "the timeline history file cannot be read: after a failover, a write acknowledged by the old primary past the new primary's last known position is reported as possibly lost (not as lost or kept), and reads that must see it go to the primary until the new timeline's position is known"
	}
	return "a statement of the probe is refused: what it reads (timeline, system identifier or WAL layout) is unknown, and reads that must see a write go to the primary"
}

// parsePrivileges reads the row of probePrivilegesSQL into the grants the
// role lacks.
func parsePrivileges(row [][]byte) []string {
	var missing []string
	if len(row) != 2 {
		return nil
	}
	if string(row[0]) != "t" {
		missing = append(missing, GrantReadAllStats)
	}
	if string(row[1]) != "t" {
		missing = append(missing, GrantReadFile)
	}
	slices.Sort(missing)
	return missing
}

// refused returns the server's message when err is a refusal for want of
// a privilege (SQLSTATE 42501), "" otherwise.
func refused(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return pgErr.Message
	}
	return ""
}

// addMissing adds grant to the sorted set missing.
func addMissing(missing []string, grant string) []string {
	if grant == "" || slices.Contains(missing, grant) {
		return missing
	}
	missing = append(slices.Clone(missing), grant)
	slices.Sort(missing)
	return missing
}

// reportMissing emits an EventPrivilegeMissing for each grant of missing
// not reported before by this topology: one per grant, whichever host
// showed it first.
func (tr *tracker) reportMissing(host string, missing []string) {
	for _, g := range missing {
		if tr.reported == nil {
			tr.reported = map[string]bool{}
		}
		if tr.reported[g] {
			continue
		}
		tr.reported[g] = true
		tr.emit(Event{Kind: EventPrivilegeMissing, Host: host, Privilege: g, Err: PrivilegeEffect(g)})
	}
}
