//go:build unix

package pgrouted_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

// volatileReads are the VOLATILE built-in functions (pg_catalog's, of the
// server itself) known to leave the session and the server as they found
// them: a statement that calls them may run on a replica's shared
// connection. Every other VOLATILE built-in must be listed by the
// classifier as a write or as session state (internal/sqlclass, funcClass):
// TestBuiltinFunctionsAreDecided holds each server the tests run on to
// that. Each group says why its functions are reads; the names cover
// PostgreSQL 13 to 18.
var volatileReads = []struct {
	why   string
	names []string
}{
	{"random values, the clock, sleeping: nothing is kept but the session's random state, which only setseed (listed as session state) makes anyone depend on",
		[]string{"random", "random_normal", "array_sample", "array_shuffle", "gen_random_uuid", "uuidv4", "uuidv7",
			"clock_timestamp", "timeofday", "timezone", "pg_sleep", "pg_sleep_for", "pg_sleep_until"}},
	{"the text of the statement running",
		[]string{"current_query"}},
	{"trigger functions: PostgreSQL refuses to call them but as triggers, and a trigger runs inside the write that fired it",
		[]string{"RI_FKey_cascade_del", "RI_FKey_cascade_upd", "RI_FKey_check_ins", "RI_FKey_check_upd",
			"RI_FKey_noaction_del", "RI_FKey_noaction_upd", "RI_FKey_restrict_del", "RI_FKey_restrict_upd",
			"RI_FKey_setdefault_del", "RI_FKey_setdefault_upd", "RI_FKey_setnull_del", "RI_FKey_setnull_upd",
			"suppress_redundant_updates_trigger", "tsvector_update_trigger", "tsvector_update_trigger_column",
			"unique_key_recheck"}},
	{"handlers of access methods, table sampling methods and text search templates: they take or return the internal type, which SQL cannot pass them",
		[]string{"bthandler", "hashhandler", "gisthandler", "ginhandler", "spghandler", "brinhandler",
			"heap_tableam_handler", "bernoulli", "system", "dsnowball_init", "dsnowball_lexize"}},
	{"reads of the catalog, of relations and of sequences (pg_sequence_last_value, pg_get_sequence_data read the sequence's relation, not the session's currval)",
		[]string{"amvalidate", "currtid", "currtid2", "pg_partition_ancestors", "pg_partition_tree",
			"pg_sequence_last_value", "pg_get_sequence_data", "pg_collation_actual_version",
			"pg_database_collation_actual_version", "pg_xact_commit_timestamp",
			"pg_xact_commit_timestamp_origin", "pg_xact_status", "txid_status", "pg_last_committed_xact",
			"pg_get_multixact_members", "pg_prepared_xact"}},
	{"sizes of relations, databases and tablespaces",
		[]string{"pg_database_size", "pg_tablespace_size", "pg_relation_size", "pg_table_size",
			"pg_indexes_size", "pg_total_relation_size"}},
	{"the state of the server that runs them (a replica answers for itself), read only: recovery and WAL, locks, shared memory, configuration files, loaded modules",
		[]string{"pg_is_in_recovery", "pg_is_wal_replay_paused", "pg_get_wal_replay_pause_state",
			"pg_last_wal_receive_lsn", "pg_last_wal_replay_lsn", "pg_last_xact_replay_timestamp",
			"pg_is_in_backup", "pg_control_checkpoint", "pg_control_init", "pg_control_recovery",
			"pg_control_system", "pg_get_wal_resource_managers", "pg_get_wal_summarizer_state",
			"pg_available_wal_summaries", "pg_wal_summary_contents", "pg_blocking_pids",
			"pg_safe_snapshot_blocking_pids", "pg_isolation_test_session_is_blocked", "pg_lock_status",
			"pg_get_backend_memory_contexts", "pg_get_shmem_allocations", "pg_get_shmem_allocations_numa",
			"pg_get_aios", "pg_get_wait_events", "pg_get_loaded_modules", "pg_jit_available",
			"pg_hba_file_rules", "pg_ident_file_mappings", "pg_show_all_file_settings",
			"pg_show_replication_origin_status", "pg_notification_queue_usage"}},
	{"reads of the server's files and directories",
		[]string{"pg_current_logfile", "pg_ls_dir", "pg_ls_logdir", "pg_ls_waldir", "pg_ls_tmpdir",
			"pg_ls_archive_statusdir", "pg_ls_logicalmapdir", "pg_ls_logicalsnapdir", "pg_ls_replslotdir",
			"pg_ls_summariesdir", "pg_read_file", "pg_read_file_old", "pg_read_binary_file", "pg_stat_file"}},
	{"cumulative statistics, read; pg_stat_clear_snapshot drops the transaction's cached snapshot of them and pg_stat_force_next_flush sends the session's counters at the transaction's end, as its end does anyway",
		[]string{"pg_stat_get_xact_blocks_fetched", "pg_stat_get_xact_blocks_hit",
			"pg_stat_get_xact_function_calls", "pg_stat_get_xact_function_self_time",
			"pg_stat_get_xact_function_total_time", "pg_stat_get_xact_numscans",
			"pg_stat_get_xact_tuples_deleted", "pg_stat_get_xact_tuples_fetched",
			"pg_stat_get_xact_tuples_hot_updated", "pg_stat_get_xact_tuples_newpage_updated",
			"pg_stat_get_xact_tuples_inserted", "pg_stat_get_xact_tuples_returned",
			"pg_stat_get_xact_tuples_updated", "pg_stat_get_recovery_prefetch", "pg_stat_get_io",
			"pg_stat_get_backend_io", "pg_stat_get_backend_wal", "pg_stat_have_stats",
			"pg_stat_clear_snapshot", "pg_stat_force_next_flush"}},
	{"transaction-scoped state: an exported snapshot and large object descriptors (lo_open, a write, opens them) end with the transaction, which runs where its first statement ran",
		[]string{"pg_export_snapshot", "lo_get", "loread", "lo_lseek", "lo_lseek64", "lo_tell", "lo_tell64",
			"lo_close"}},
}

// TestBuiltinFunctionsAreDecided reads from the primary every VOLATILE
// function and every procedure of pg_catalog and information_schema that
// no extension installed (pg_depend, deptype 'e'), and requires each to be
// decided: a call of it is a write or session state for the classifier,
// or it is one of volatileReads. A function that a new PostgreSQL version
// adds fails the test, by name, until it is decided. It runs in the
// compatibility subset (scripts/test-versions.sh), on every major version.
func TestBuiltinFunctionsAreDecided(t *testing.T) {
	ctx := testCtx(t)
	reads := map[string]bool{}
	for _, g := range volatileReads {
		for _, n := range g.names {
			if reads[n] {
				t.Errorf("volatileReads lists %s twice", n)
			}
			reads[n] = true
			// A function listed both ways: which is it?
			if c := classOfBuiltin(n); c != sqlclass.Read {
				t.Errorf("%s is in volatileReads, but a call of it is %v", n, c)
			}
		}
	}

	c, err := pgx.Connect(ctx, cluster.Primary().DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var version string
	if err := c.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	rows, err := c.Query(ctx, `SELECT DISTINCT n.nspname::text, p.proname::text
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname IN ('pg_catalog', 'information_schema')
  AND (p.provolatile = 'v' OR p.prokind = 'p')
  AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
    WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid AND d.deptype = 'e')
ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	var undecided []string
	seen := 0
	for rows.Next() {
		var schema, name string
		if err := rows.Scan(&schema, &name); err != nil {
			t.Fatal(err)
		}
		seen++
		switch c := classOfBuiltin(name); c {
		case sqlclass.Write, sqlclass.Session:
		case sqlclass.Read:
			if !reads[name] {
				undecided = append(undecided, schema+"."+name)
			}
		default:
			t.Errorf("a call of %s.%s is %v", schema, name, c)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Seen far fewer than any version has: the query went wrong.
	if seen < 100 {
		t.Fatalf("PostgreSQL %s: only %d VOLATILE built-in functions", version, seen)
	}
	if len(undecided) > 0 {
		t.Errorf("PostgreSQL %s: %d VOLATILE built-in functions are neither a write nor session state for the classifier (internal/sqlclass, funcClass) nor known reads (volatileReads): decide each:\n%s",
			version, len(undecided), strings.Join(undecided, "\n"))
	} else {
		t.Logf("PostgreSQL %s: %d VOLATILE built-in functions, all decided", version, seen)
	}
}

// classOfBuiltin is the class a call of the built-in function name gives a
// read: pg_catalog's, quoted so that its name is never taken for a key word.
func classOfBuiltin(name string) sqlclass.Class {
	if name == "" || strings.Contains(name, `"`) {
		return sqlclass.Unknown
	}
	return sqlclass.Classify(`SELECT pg_catalog."` + name + `"()`).Class
}
