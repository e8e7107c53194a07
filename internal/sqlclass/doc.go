// Package sqlclass classifies SQL statements for routing between a
// PostgreSQL primary and its read replicas.
//
// [Classify] tells a read from everything that must run on the primary, and
// among those the statements that leave session state behind:
//
//	r := sqlclass.Classify(`SELECT * FROM "users" WHERE "id" = $1 FOR UPDATE`)
//	// r.Class == sqlclass.Lock, r.Hint == sqlclass.NoHint, r.Statements == 1
//
// The classification is lexical and conservative: when in doubt, a
// statement is not a [Read]. It runs on every statement, so it makes one
// pass over the text (two in a rare case, below), uses no regular
// expression and does not allocate.
//
// # Lexical rules
//
// The text is split into tokens as PostgreSQL's own lexer
// (src/backend/parser/scan.l) splits it, state by state, so that nothing
// inside a string constant ('…' where a doubled quote stands for a quote,
// E'…' with backslash escapes too, B'…' and X'…' which the first quote
// ends, N'…', U&'…'), a quoted identifier ("…" and U&"…", likewise with
// doubled quotes), a dollar quote ($$…$$, $tag$…$tag$, tags
// case-sensitive; $1 is a parameter) or a comment (-- to the end of the
// line, /* … */ nested) counts as a key word or a function call, and
// nothing outside one is missed. Key words and function names match
// without regard to ASCII case, and a function name may be
// schema-qualified or quoted: pg_catalog.nextval(, "nextval" (.
//
// A string constant continued on another line (two constants separated by
// whitespace that holds a newline, and -- comments: 'a' newline 'b' is
// 'ab') is one constant, read in the mode of its first part: an E'x'
// followed on the next line by a constant that starts with a backslash and
// a quote is one E'…' constant, in which that backslash escapes the quote.
// Each separate constant is read in its own mode.
//
// A U&"…" identifier is decoded (its \XXXX and \+XXXXXX escapes, with the
// character of a UESCAPE 'c' clause that follows it in place of \, the
// clause being part of the token) before it is compared with key words and
// function names:
// U&"\0073et_config"(…) calls set_config, and EXPLAIN (U&"\0061nalyze") is
// EXPLAIN ANALYZE.
//
// Standard '…' strings are read with standard_conforming_strings on, the
// default since PostgreSQL 9.1 (and what pgx expects). When such a string
// holds a backslash, the text is read a second time as a server with the
// setting off would read it (every '…' string, and its continuations,
// with backslash escapes), and the more dangerous reading wins.
//
// Input that ends inside a string, quoted identifier, dollar quote or block
// comment is a syntax error for the server, but what the unterminated part
// swallowed is not known to be harmless: such input is at least [Unknown].
// A line comment that runs to the end of the input is not unterminated.
//
// # Statements
//
// The first key word of a statement, after comments, whitespace and opening
// parentheses, decides its class:
//
//   - [Read]: SELECT, WITH, VALUES, TABLE, SHOW, and EXPLAIN without
//     ANALYZE, of anything (it does not run the statement).
//   - EXPLAIN ANALYZE (or ANALYSE, or ANALYZE in the option list, quoted or
//     not, U&"…" decoded, with any value, even false) runs the statement: it gets the
//     class of the statement it explains, and is [Unknown] without one.
//   - [Write]: INSERT, UPDATE, DELETE, MERGE, COPY (both directions: COPY
//     TO a server file writes, and COPY is not worth the risk), CREATE,
//     ALTER, DROP, TRUNCATE, GRANT, REVOKE, COMMENT, VACUUM, ANALYZE,
//     CLUSTER, REINDEX, REFRESH, NOTIFY, CHECKPOINT, IMPORT,
//     SECURITY LABEL, REASSIGN, EXECUTE, FETCH, MOVE, CLOSE, SET LOCAL,
//     SET CONSTRAINTS. (SET LOCAL and SET CONSTRAINTS last until the end of
//     the transaction; outside one they only warn, so they do not pin.)
//   - [Lock]: LOCK.
//   - [Tx]: BEGIN, START, COMMIT, END, ROLLBACK, ABORT, SAVEPOINT, RELEASE,
//     SET TRANSACTION, PREPARE TRANSACTION (and COMMIT/ROLLBACK PREPARED).
//   - [Session]: SET (but SET LOCAL, SET CONSTRAINTS, SET TRANSACTION
//     above; SET SESSION CHARACTERISTICS is Session), RESET, DISCARD,
//     PREPARE, DEALLOCATE, DECLARE, LISTEN, UNLISTEN, LOAD, CALL and DO
//     (the code they run may change the session), and CREATE
//     [OR REPLACE] [GLOBAL|LOCAL] TEMP|TEMPORARY … or any CREATE that names
//     the pg_temp schema. CREATE UNLOGGED is a plain [Write].
//   - Anything else is [Unknown].
//
// A read becomes something else when, outside literals, quoted identifiers
// and comments, it has (even where the word is an unquoted column name,
// which only makes it look more dangerous than it is):
//
//   - INSERT, UPDATE, DELETE or MERGE anywhere (a data-modifying CTE, or
//     WITH … INSERT): [Write];
//   - INTO (SELECT … INTO creates a table): [Write], or [Session] when
//     followed by TEMP, TEMPORARY or pg_temp (INTO [LOCAL|GLOBAL]
//     TEMP|TEMPORARY [TABLE] t; LOCAL, GLOBAL, UNLOGGED and TABLE skipped);
//   - FOR followed by UPDATE, NO, SHARE or KEY anywhere (FOR UPDATE, FOR NO
//     KEY UPDATE, FOR SHARE, FOR KEY SHARE, after subqueries, ORDER BY,
//     LIMIT …): [Lock].
//
// # Functions
//
// A call of one of these functions, in any statement but a plain EXPLAIN,
// raises its class:
//
//   - [Session]: set_config (whether is_local is true or false), setseed,
//     every pg_advisory_* and pg_try_advisory_* function (advisory locks
//     succeed on a standby and lock nothing that matters there; the xact
//     variants are included, conservatively), the dblink family (dblink,
//     dblink_exec, dblink_connect, dblink_open, …: named connections and
//     cursors are session state, and remote statements may write),
//     pg_replication_origin_session_*, and query_to_xml, query_to_xmlschema,
//     query_to_xml_and_xmlschema, cursor_to_xml, cursor_to_xmlschema,
//     ts_stat and ts_rewrite, which run a query given as text;
//     binary_upgrade_* (pg_upgrade's: they set what the session's next
//     CREATE uses); and functions of contrib extensions that change the
//     session: pg_trgm's set_limit, isn's isn_weak, tablefunc's crosstab,
//     crosstab2, crosstab3, crosstab4 and connectby (which run a query
//     given as text).
//   - [Write]: nextval, setval; currval and lastval (they read state of the
//     session that called nextval, which is on the primary); pg_notify;
//     large objects: lo_creat, lo_create, lo_from_bytea, lo_import,
//     lo_export, lo_open, lo_put, lo_unlink, lowrite, lo_truncate,
//     lo_truncate64; functions that assign a transaction id or fail on a
//     standby: txid_current, pg_current_xact_id, pg_current_wal_lsn,
//     pg_current_wal_insert_lsn, pg_current_wal_flush_lsn, pg_switch_wal,
//     pg_switch_xlog, pg_create_* (pg_create_restore_point, replication
//     slots), pg_drop_replication_slot, pg_copy_*_replication_slot,
//     pg_replication_slot_advance, pg_logical_* (pg_logical_slot_get_changes
//     and _get_binary_changes, which consume a slot, _peek_changes and
//     _peek_binary_changes, whose slot is the primary's, and
//     pg_logical_emit_message), pg_replication_origin_*, pg_backup_start,
//     pg_backup_stop, pg_start_backup, pg_stop_backup,
//     pg_log_standby_snapshot, brin_summarize_range,
//     brin_summarize_new_values, brin_desummarize_range,
//     gin_clean_pending_list, pg_import_system_collations, pg_restore_* and
//     pg_clear_* (planner statistics: pg_restore_relation_stats, …),
//     pg_nextoid, pg_stop_making_pinned_objects, pg_extension_config_dump;
//     functions that act on the server they run on: pg_terminate_backend,
//     pg_cancel_backend, pg_promote, pg_reload_conf, pg_rotate_logfile,
//     pg_rotate_logfile_old, pg_stat_reset*, pg_stat_statements_reset,
//     pg_log_backend_memory_contexts; and functions that act on the standby
//     they run on, pg_wal_replay_pause, pg_wal_replay_resume and
//     pg_sync_replication_slots: sent to the primary, where they fail,
//     rather than to a standby the caller did not choose (to use them,
//     connect to that standby).
//
// Every other built-in function is taken as a read. The VOLATILE ones
// among them (pg_sleep, random, clock_timestamp, pg_ls_dir,
// pg_stat_clear_snapshot, lo_get, …) are decided one by one, each group
// with its reason, in volatileReads (builtins_test.go, at the module's
// root): its test TestBuiltinFunctionsAreDecided reads pg_proc on each
// PostgreSQL version of the compatibility subset (13 to 18) and fails
// naming every VOLATILE function or procedure of pg_catalog and
// information_schema, not of an extension, that is neither in the list
// above nor a known read.
//
// # User functions
//
// What a user-defined function does inside is invisible in the text: it
// may write, or change the session (set_config, advisory locks). [Classify]
// does not judge such calls; [ClassifyWith] judges them by a [Functions]
// snapshot of the primary's catalog ([CatalogQuery]) and the functions
// configured as reads or writes, in queries and DML (not in DDL; EXPLAIN is
// judged as what it explains, with or without ANALYZE):
//
//   - a call of a function configured as a write: [Write], [FuncWrite];
//   - a call of a name of which some visible definition (in any schema, or
//     in the schema the call names) is VOLATILE or a procedure, outside
//     pg_catalog and information_schema (whose functions the list above
//     judges), not one of the functions of contrib extensions known to
//     neither write nor change the session (uuid_generate_v4,
//     gen_random_uuid, normal_rand, …: each function is listed, with the
//     install script that declares it, no extension is trusted whole) and
//     not configured as a read: [Session], [FuncVolatile];
//   - a call of a name the catalog does not know (a function created since
//     the snapshot, or no snapshot yet), or a cast x::t to a type it does
//     not know: [Session], [FuncUnknown];
//   - user code the text does not show as a call (an aggregate's support
//     functions, attribute notation, an operator, a cast, a domain's
//     check, a type's I/O, a view, a policy, a SQL-standard body) that may
//     write or change the session, resolved by [Functions.SetHidden]
//     (hidden.go): [Session], [FuncHidden] (an aggregate or a function
//     whose body or types run such code: [FuncVolatile]);
//   - only the server's own functions count as built-ins: one an
//     extension installed in pg_catalog is judged as a user function;
//   - otherwise (STABLE and IMMUTABLE definitions only) the call does not
//     change the class.
//
// A word before a parenthesis is a call unless it is the syntax of SQL:
// a key word (IN, EXISTS, COALESCE, CAST, FILTER, OVER, …) that the
// catalog does not know as a function, the column list of a CTE
// (WITH t(a, b) AS …) or of INSERT INTO t (…), an alias list (AS t(a),
// FROM t x(a), FROM (…) s(a)), or a type modifier (::numeric(10,2)).
// [Result.Func] says what the calls made of the statement, and
// [Result.FuncName] names the function.
//
// # Several statements
//
// Statements are separated by semicolons outside literals and comments.
// The [Result.Class] of the input is the most dangerous class among its
// statements, in this order:
//
//	Read < Write < Unknown < Lock < Tx < Session
//
// so a string with a transaction-control statement goes to the primary, and
// one that changes session state also pins. [Result.Has] tells which
// classes occur. Empty statements do not count; an input with no statement
// at all is a [Read] with [Result.Statements] zero. A CREATE FUNCTION …
// BEGIN ATOMIC … END body is split at its semicolons too, which can only
// make it look more dangerous.
//
// # Routing hints
//
// A comment whose whole content, trimmed of whitespace and ignoring ASCII
// case, is pgrouted:primary or pgrouted:replica forces the route, when it
// comes before the first token of the input, either alone or among other
// leading comments (a tracing comment may come first):
//
//	/* pgrouted:replica */ SELECT count(*) FROM events
//	/* traceparent='00-…' */ -- pgrouted:primary
//	SELECT * FROM accounts WHERE id = $1
//
// Both /* */ and -- comments count. If both hints are given, primary wins.
// A hint anywhere else (inside parentheses, before a later statement) is an
// ordinary comment. The hint is returned in [Result.Hint] and does not
// change [Result.Class]: a write with a replica hint is still a [Write],
// which the caller refuses.
package sqlclass
