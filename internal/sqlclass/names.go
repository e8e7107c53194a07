package sqlclass

// keyword is a key word the classifier reacts to.
type keyword uint8

const (
	kwNone keyword = iota

	// Statements that read.
	kwSelect
	kwValues
	kwTable
	kwWith
	kwShow
	kwExplain

	// Data-modifying statements; inside a read they make it a write.
	kwInsert
	kwUpdate
	kwDelete
	kwMerge

	// Other statements that write.
	kwWrite

	kwLock

	// Statements that change session state.
	kwSet
	kwCreate
	kwPrepare
	kwSession // RESET, DISCARD, DEALLOCATE, DECLARE, LISTEN, UNLISTEN, LOAD

	// Transaction control.
	kwTx

	// Words that matter after another word.
	kwLocal
	kwTransaction
	kwConstraints
	kwTemp // TEMP, TEMPORARY
	kwGlobal
	kwCreateModifier
	kwAnalyze // ANALYZE, ANALYSE
	kwVerbose
	kwInto
	kwFor
	kwLockStrength // SHARE, NO, KEY: after FOR, a locking clause
	kwUnlogged
)

// maxKeywordLen is the length of the longest word keywordOf knows.
const maxKeywordLen = 11

// keywordOf returns the key word w is, ignoring ASCII case, or kwNone.
func keywordOf(w string) keyword {
	if len(w) < 2 || len(w) > maxKeywordLen {
		return kwNone
	}
	var buf [maxKeywordLen]byte
	for i := 0; i < len(w); i++ {
		c := w[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	switch string(buf[:len(w)]) {
	case "select":
		return kwSelect
	case "values":
		return kwValues
	case "table":
		return kwTable
	case "with":
		return kwWith
	case "show":
		return kwShow
	case "explain":
		return kwExplain

	case "insert":
		return kwInsert
	case "update":
		return kwUpdate
	case "delete":
		return kwDelete
	case "merge":
		return kwMerge

	case "copy", "alter", "drop", "truncate", "grant", "revoke", "comment",
		"vacuum", "cluster", "reindex", "refresh", "notify",
		"checkpoint", "import", "security", "reassign", "execute", "fetch",
		"move", "close":
		return kwWrite

	case "lock":
		return kwLock

	case "set":
		return kwSet
	case "create":
		return kwCreate
	case "prepare":
		return kwPrepare
	case "reset", "discard", "deallocate", "declare", "listen", "unlisten", "load",
		"call", "do":
		// CALL and DO run code whose effects the text does not show: it
		// may change the session (set_config, advisory locks).
		return kwSession

	case "begin", "start", "commit", "end", "rollback", "abort", "savepoint", "release":
		return kwTx

	case "local":
		return kwLocal
	case "transaction":
		return kwTransaction
	case "constraints":
		return kwConstraints
	case "temp", "temporary":
		return kwTemp
	case "global":
		return kwGlobal
	case "or", "replace", "recursive":
		return kwCreateModifier
	case "unlogged":
		return kwUnlogged
	case "analyze", "analyse":
		return kwAnalyze
	case "verbose":
		return kwVerbose
	case "into":
		return kwInto
	case "for":
		return kwFor
	case "share", "no", "key":
		return kwLockStrength
	}
	return kwNone
}

// isPgTemp reports whether w names the session's temporary schema: pg_temp,
// or pg_temp_N.
func isPgTemp(w string) bool {
	return hasPrefixFold(w, "pg_temp")
}

// maxFuncLen is the length of the longest function name funcClass knows
// ("pg_create_logical_replication_slot").
const maxFuncLen = 34

// funcClass returns the class a call of the function named name gives a
// statement, ignoring ASCII case, or Read for a function that does not
// matter. The list is in the package documentation.
func funcClass(name string) Class {
	if len(name) < 6 {
		return Read
	}
	switch name[0] | 0x20 {
	case 'p':
		// The prefixes below all start with pg_: one comparison for its
		// fourth letter instead of one per prefix.
		if !hasPrefixFold(name, "pg_") {
			break
		}
		switch name[3] | 0x20 {
		case 'a':
			if hasPrefixFold(name, "pg_advisory_") {
				return Session
			}
		case 't':
			if hasPrefixFold(name, "pg_try_advisory_") {
				return Session
			}
		case 'r':
			switch {
			case hasPrefixFold(name, "pg_replication_origin_session_"):
				return Session
			case hasPrefixFold(name, "pg_replication_origin_"):
				// pg_replication_origin_create, _drop, _advance …
				return Write
			case hasPrefixFold(name, "pg_restore_"):
				// pg_restore_relation_stats, pg_restore_attribute_stats
				// (18): they write planner statistics into pg_class
				// and pg_statistic.
				return Write
			}
		case 'c':
			switch {
			case hasPrefixFold(name, "pg_create_"):
				// pg_create_restore_point, pg_create_*_replication_slot.
				return Write
			case hasPrefixFold(name, "pg_clear_"):
				// pg_clear_relation_stats, pg_clear_attribute_stats
				// (18): as pg_restore_*.
				return Write
			}
		case 's':
			if hasPrefixFold(name, "pg_stat_reset") {
				// pg_stat_reset, _shared, _single_table_counters, …:
				// they reset the counters of the server they reach.
				return Write
			}
		case 'l':
			if hasPrefixFold(name, "pg_logical_") {
				// pg_logical_slot_get_changes, _get_binary_changes
				// (they consume a slot), _peek_changes,
				// _peek_binary_changes (the slot is the primary's: a
				// standby has none of it, or only a synchronized copy
				// it cannot decode from), and pg_logical_emit_message
				// (it writes WAL).
				return Write
			}
		}
	case 'b':
		if hasPrefixFold(name, "binary_upgrade_") {
			// binary_upgrade_set_next_*_oid, …: pg_upgrade's; they set
			// what the session's next CREATE uses (they fail outside
			// binary-upgrade mode).
			return Session
		}
	case 'd':
		if hasPrefixFold(name, "dblink") {
			// dblink, dblink_exec, dblink_connect, dblink_open, …: named
			// connections and cursors are session state, and the remote
			// statements may write.
			return Session
		}
	case 'c', 'g', 'i', 'l', 'n', 'q', 's', 't':
	default:
		return Read
	}
	if len(name) > maxFuncLen {
		return Read
	}
	var buf [maxFuncLen]byte
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	switch string(buf[:len(name)]) {
	case "set_config", "setseed",
		"query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema",
		"cursor_to_xml", "cursor_to_xmlschema", "ts_stat", "ts_rewrite":
		// setseed seeds random() for the session; the *_to_xml functions,
		// ts_stat(text) and ts_rewrite(tsquery, text) run a query (or a
		// cursor of the session) given as text, which may do anything
		// (ts_rewrite(tsquery, tsquery, tsquery) does not, but shares
		// the name).
		return Session

	case "set_limit", "isn_weak",
		"crosstab", "crosstab2", "crosstab3", "crosstab4", "connectby":
		// Functions of contrib extensions that change the session or
		// run a query given as text: see extensionFunctions.
		return Session

	case "nextval", "setval", "currval", "lastval",
		"pg_notify",
		"lo_creat", "lo_create", "lo_from_bytea", "lo_import", "lo_export",
		"lo_open", "lo_put", "lo_unlink", "lowrite", "lo_truncate", "lo_truncate64",
		"txid_current", "pg_current_xact_id",
		"pg_current_wal_lsn", "pg_current_wal_insert_lsn", "pg_current_wal_flush_lsn",
		"pg_switch_wal", "pg_switch_xlog", "pg_promote",
		"pg_terminate_backend", "pg_cancel_backend",
		"pg_drop_replication_slot", "pg_replication_slot_advance",
		"pg_copy_physical_replication_slot", "pg_copy_logical_replication_slot",
		"pg_reload_conf", "pg_rotate_logfile", "pg_rotate_logfile_old",
		"pg_backup_start", "pg_backup_stop", "pg_start_backup", "pg_stop_backup",
		"pg_stat_statements_reset", "pg_log_standby_snapshot", "pg_log_backend_memory_contexts",
		"brin_summarize_range", "brin_summarize_new_values", "brin_desummarize_range",
		"gin_clean_pending_list", "pg_import_system_collations",
		"pg_nextoid", "pg_stop_making_pinned_objects", "pg_extension_config_dump":
		return Write

	case "pg_wal_replay_pause", "pg_wal_replay_resume", "pg_sync_replication_slots":
		// They act on the standby that runs them (its replay, its
		// copies of the primary's failover slots): on a replica that
		// the pool picked they would pause or change one the caller did
		// not choose. On the primary they fail ("recovery is not in
		// progress"); to act on a standby, connect to it.
		return Write
	}
	return Read
}

// bodyKeyword is keywordOf for the few words that matter in the body of a
// read, and faster: it runs on every word of every read.
func bodyKeyword(w string) keyword {
	if len(w) < 2 || len(w) > 9 {
		return kwNone
	}
	switch w[0] | 0x20 {
	case 'd':
		if equalFold(w, "delete") {
			return kwDelete
		}
	case 'f':
		if equalFold(w, "for") {
			return kwFor
		}
	case 'i':
		switch {
		case equalFold(w, "into"):
			return kwInto
		case equalFold(w, "insert"):
			return kwInsert
		}
	case 'g':
		if equalFold(w, "global") {
			return kwGlobal
		}
	case 'l':
		if equalFold(w, "local") {
			return kwLocal
		}
	case 'k', 'n', 's':
		if equalFold(w, "key") || equalFold(w, "no") || equalFold(w, "share") {
			return kwLockStrength
		}
	case 'm':
		if equalFold(w, "merge") {
			return kwMerge
		}
	case 't':
		switch {
		case equalFold(w, "table"):
			return kwTable
		case equalFold(w, "temp"), equalFold(w, "temporary"):
			return kwTemp
		}
	case 'u':
		switch {
		case equalFold(w, "update"):
			return kwUpdate
		case equalFold(w, "unlogged"):
			return kwUnlogged
		}
	}
	return kwNone
}
