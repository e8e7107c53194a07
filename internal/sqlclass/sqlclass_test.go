package sqlclass

import (
	"strings"
	"testing"
)

// classifyTests is the table of statements and their classes. It also seeds
// FuzzClassify.
var classifyTests = []struct {
	sql  string
	want Class
}{
	// Plain reads.
	{"SELECT 1", Read},
	{"select 1", Read},
	{"  \n\tSeLeCt now()", Read},
	{"SELECT * FROM users WHERE id = $1", Read},
	{"VALUES (1), (2)", Read},
	{"TABLE users", Read},
	{"SHOW search_path", Read},
	{"SHOW ALL", Read},
	{"WITH x AS (SELECT 1) SELECT * FROM x", Read},
	{"WITH RECURSIVE t(n) AS (VALUES (1) UNION ALL SELECT n+1 FROM t WHERE n < 10) SELECT sum(n) FROM t", Read},
	{"WITH x AS MATERIALIZED (SELECT 1) SELECT * FROM x", Read},
	{"(SELECT 1)", Read},
	{"((SELECT 1) UNION (SELECT 2))", Read},
	{"( ( VALUES (1) ) )", Read},
	{"SELECT count(*), coalesce(max(a), 0) FROM t GROUP BY b HAVING count(*) > 1", Read},
	{"SELECT substring(name FROM 1 FOR 3) FROM t", Read},
	{"SELECT overlay('abc' placing 'x' from 2 for 1)", Read},
	{"SELECT pg_is_in_recovery()", Read},
	{"SELECT txid_current_if_assigned()", Read},
	{"SELECT pg_advisory_lock_count FROM stats", Read},
	{"SELECT nextval FROM t", Read},
	{"SELECT updated_at, deleted_at, inserted_by FROM t", Read},
	{"SELECT * FROM t ORDER BY update_time FOR READ ONLY", Read},
	{"SELECT * FROM XMLTABLE('/r' PASSING x COLUMNS id FOR ORDINALITY, v text)", Read},
	{"SELECT 1 AS \"for\", 2 AS \"update\"", Read},

	// Comments before and inside a read.
	{"-- a comment\nSELECT 1", Read},
	{"/* a comment */ SELECT 1", Read},
	{"/* outer /* nested */ still comment */ SELECT 1", Read},
	{"/* DELETE FROM t */ SELECT 1", Read},
	{"SELECT 1 -- ; DELETE FROM t", Read},
	{"SELECT 1 /* ; DELETE FROM t */", Read},
	{"SELECT 1 /* a /* b */ ; DELETE FROM t */", Read},
	{"SELECT 1 --\r; DELETE FROM t", Write},
	{"SELECT 1 /* a /* b */ */ ; DELETE FROM t", Write},
	{"SELECT 1 +-- comment\n2", Read},
	{"SELECT 2 */* comment */ 3", Read},
	{"( /* c */ SELECT 1 )", Read},

	// String constants, quoted identifiers and dollar quotes hide key words.
	{"SELECT 'DELETE FROM t'", Read},
	{"SELECT 'it''s; DELETE FROM t'", Read},
	{"SELECT 'for update'", Read},
	{"SELECT * FROM t WHERE status = 'for update'", Read},
	{"SELECT E'it\\'s; DELETE FROM t'", Read},
	{"SELECT e'\\\\'; DELETE FROM t", Write},
	{"SELECT E'a\\'b' FROM t FOR UPDATE", Lock},
	{"SELECT U&'d\\0061t\\+000061' FROM t", Read},
	{"SELECT B'1010', X'1F' FROM t", Read},
	{"SELECT N'nextval(1)'", Read},
	{"SELECT abe'x'", Read},
	{"SELECT \"update\" FROM t", Read},
	{"SELECT \"delete\", \"insert\" FROM \"for\" WHERE \"into\" = 1", Read},
	{"SELECT \"a\"\"b; DELETE FROM t\" FROM t", Read},
	{"SELECT $$DELETE FROM t$$", Read},
	{"SELECT $tag$ it's $$ ; DELETE FROM t $tag$", Read},
	{"SELECT $a$ $A$; DELETE FROM t $a$", Read},
	{"SELECT $a$x$ab$; DELETE $a$", Read},
	{"SELECT $1, $2 FROM t WHERE a = $3", Read},
	{"SELECT 1 FROM t WHERE a = $1 AND b = 'nextval('", Read},
	{"SELECT 'nextval(''s'')'", Read},
	{"SELECT $$select nextval('s')$$", Read},
	{"SELECT \"nextval\" FROM t", Read},
	{"SELECT a$$b FROM t", Read},
	{"SELECT 1$$x$$", Read},
	{"SELECT $x FOR UPDATE", Lock},

	// Data-modifying CTEs and other writes hidden in reads.
	{"WITH d AS (DELETE FROM t WHERE a = 1 RETURNING *) SELECT * FROM d", Write},
	{"WITH u AS (UPDATE t SET a = 1 RETURNING *) SELECT count(*) FROM u", Write},
	{"WITH i AS (INSERT INTO t VALUES (1) RETURNING id) SELECT id FROM i", Write},
	{"WITH m AS (MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE RETURNING *) SELECT 1", Write},
	{"WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", Write},
	{"WITH x AS (SELECT 1) DELETE FROM t", Write},
	{"with a as (select 1), b as (update t set x = 1 returning x) select * from a, b", Write},
	{"SELECT * INTO new_t FROM t", Write},
	{"SELECT a, b INTO UNLOGGED TABLE new_t FROM t", Write},
	{"SELECT * INTO TEMP t2 FROM t", Session},
	{"SELECT * INTO TEMPORARY TABLE t2 FROM t", Session},
	{"SELECT * INTO pg_temp.t2 FROM t", Session},
	{"SELECT * INTO \"pg_temp\".t2 FROM t", Session},
	{"SELECT * INTO TABLE pg_temp_3.t2 FROM t", Session},

	// Locking reads.
	{"SELECT * FROM t FOR UPDATE", Lock},
	{"SELECT * FROM t WHERE id = $1 FOR NO KEY UPDATE", Lock},
	{"SELECT * FROM t FOR SHARE", Lock},
	{"SELECT * FROM t FOR KEY SHARE", Lock},
	{"SELECT * FROM t ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED", Lock},
	{"SELECT * FROM t ORDER BY id LIMIT 1 OFFSET 2 FOR UPDATE OF t NOWAIT", Lock},
	{"SELECT * FROM (SELECT * FROM t) s FOR UPDATE", Lock},
	{"SELECT * FROM t WHERE a IN (SELECT a FROM u FOR SHARE)", Lock},
	{"select * from t for\nupdate", Lock},
	{"SELECT * FROM t FOR /* c */ UPDATE", Lock},
	{"(SELECT * FROM t FOR UPDATE)", Lock},
	{"(SELECT * FROM t) FOR UPDATE", Lock},
	{"SELECT * FROM t FOR NO KEY UPDATE OF t SKIP LOCKED", Lock},
	{"SELECT 1for update", Lock},
	{"WITH x AS (SELECT * FROM t FOR UPDATE) SELECT * FROM x", Lock},
	{"WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d FOR UPDATE", Lock},
	{"LOCK TABLE t IN ACCESS EXCLUSIVE MODE", Lock},
	{"lock t", Lock},

	// Functions.
	{"SELECT nextval('seq')", Write},
	{"SELECT NEXTVAL('seq')", Write},
	{"SELECT pg_catalog.nextval('seq')", Write},
	{"SELECT \"nextval\"('seq')", Write},
	{"SELECT pg_catalog.\"nextval\" ('seq')", Write},
	{"SELECT nextval /* c */ ('seq')", Write},
	{"SELECT setval('seq', 42)", Write},
	{"SELECT currval('seq')", Write},
	{"SELECT id, nextval('s') FROM t", Write},
	{"VALUES (nextval('s'))", Write},
	{"SELECT * FROM t WHERE id = (SELECT nextval('s'))", Write},
	{"SELECT pg_notify('chan', 'payload')", Write},
	{"SELECT lo_create(0)", Write},
	{"SELECT lo_import('/tmp/x')", Write},
	{"SELECT lo_unlink(1234)", Write},
	{"SELECT lowrite(0, 'x')", Write},
	{"SELECT txid_current()", Write},
	{"SELECT pg_current_xact_id()", Write},
	{"SELECT pg_current_wal_lsn()", Write},
	{"SELECT pg_switch_wal()", Write},
	{"SELECT pg_create_restore_point('x')", Write},
	{"SELECT pg_create_logical_replication_slot('s', 'pgoutput')", Write},
	{"SELECT pg_terminate_backend(123)", Write},
	{"SELECT pg_cancel_backend(pid) FROM pg_stat_activity", Write},
	{"SELECT dblink_exec('conn', 'DELETE FROM t')", Session},
	{"SELECT pg_advisory_lock(1)", Session},
	{"SELECT pg_advisory_unlock(1)", Session},
	{"SELECT pg_advisory_unlock_all()", Session},
	{"SELECT pg_try_advisory_lock(1, 2)", Session},
	{"SELECT pg_advisory_xact_lock(1)", Session},
	{"SELECT pg_try_advisory_xact_lock_shared(1)", Session},
	{"SELECT PG_ADVISORY_LOCK(hashtext('job'))", Session},
	{"SELECT pg_catalog.pg_advisory_lock(1)", Session},
	{"SELECT set_config('app.user', '42', false)", Session},
	{"SELECT set_config('app.user', '42', true)", Session},
	{"SELECT pg_catalog.set_config('search_path', '', false)", Session},
	{"SELECT dblink_connect('c', 'dbname=x')", Session},
	{"SELECT pg_replication_origin_session_setup('o')", Session},
	{"SELECT pg_wal_replay_pause()", Write},
	{"SELECT pg_catalog.pg_wal_replay_resume()", Write},
	{"SELECT pg_sync_replication_slots()", Write},
	{"SELECT pg_logical_slot_peek_changes('s', NULL, NULL)", Write},
	{"SELECT pg_restore_relation_stats('schemaname', 'public', 'relname', 't', 'reltuples', 1::real)", Write},
	{"SELECT pg_clear_attribute_stats('public', 't', 'a', false)", Write},
	{"SELECT binary_upgrade_set_next_pg_type_oid(16384)", Session},
	{"SELECT pg_is_wal_replay_paused(), pg_get_wal_replay_pause_state()", Read},
	{"SELECT pg_stat_clear_snapshot(), pg_stat_force_next_flush()", Read},
	{"SELECT lo_get(1234), pg_export_snapshot()", Read},
	{"SELECT 'pg_advisory_lock(1)'", Read},
	{"SELECT $$pg_advisory_lock(1)$$", Read},
	{"SELECT /* pg_advisory_lock(1) */ 1", Read},
	{"SELECT pg_advisory_lock", Read},
	{"INSERT INTO t VALUES (pg_advisory_lock(1))", Session},
	{"UPDATE t SET a = nextval('s')", Write},
	{"SELECT * FROM t FOR UPDATE; SELECT pg_advisory_lock(1)", Session},

	// EXPLAIN.
	{"EXPLAIN SELECT 1", Read},
	{"EXPLAIN DELETE FROM t", Write},
	{"EXPLAIN INSERT INTO t VALUES (nextval('s'))", Write},
	{"EXPLAIN SELECT pg_advisory_lock(1)", Session},
	{"EXPLAIN VERBOSE UPDATE t SET a = 1", Write},
	{"EXPLAIN (FORMAT JSON, COSTS OFF) DELETE FROM t", Write},
	{"EXPLAIN (SELECT 1)", Read},
	{"EXPLAIN ((SELECT 1))", Read},
	{"EXPLAIN ANALYZE SELECT 1", Read},
	{"EXPLAIN ANALYSE SELECT 1", Read},
	{"EXPLAIN ANALYZE VERBOSE SELECT * FROM t", Read},
	{"EXPLAIN ANALYZE DELETE FROM t", Write},
	{"explain analyze update t set a = 1", Write},
	{"EXPLAIN ANALYZE VERBOSE INSERT INTO t VALUES (1)", Write},
	{"EXPLAIN ANALYZE SELECT nextval('s')", Write},
	{"EXPLAIN ANALYZE SELECT * FROM t FOR UPDATE", Lock},
	{"EXPLAIN ANALYZE SELECT pg_advisory_lock(1)", Session},
	{"EXPLAIN ANALYZE WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", Write},
	{"EXPLAIN ANALYZE (SELECT 1)", Read},
	{"EXPLAIN ANALYZE CREATE TABLE t2 AS SELECT 1", Write},
	{"EXPLAIN ANALYZE CREATE TEMP TABLE t2 AS SELECT 1", Session},
	{"EXPLAIN ANALYZE EXECUTE p(1)", Write},
	{"EXPLAIN (ANALYZE) DELETE FROM t", Write},
	{"EXPLAIN (ANALYZE, BUFFERS) SELECT 1", Read},
	{"EXPLAIN (FORMAT JSON, ANALYZE TRUE) UPDATE t SET a = 1", Write},
	{"EXPLAIN (analyze on, timing off) MERGE INTO t USING s ON true WHEN MATCHED THEN DELETE", Write},
	{"EXPLAIN (ANALYZE false) DELETE FROM t", Write}, // conservative
	{"EXPLAIN (\"analyze\") DELETE FROM t", Write},
	{"EXPLAIN (ANALYZE) (SELECT 1)", Read},
	{"EXPLAIN /* ANALYZE */ DELETE FROM t", Write},
	{"EXPLAIN 'ANALYZE' DELETE FROM t", Unknown},
	{"EXPLAIN ANALYZE 'x'", Unknown},
	{"EXPLAIN ANALYZE", Unknown},
	{"EXPLAIN (ANALYZE)", Unknown},
	{"EXPLAIN", Read},
	{"EXPLAIN SELECT 1; DELETE FROM t", Write},

	// Writes.
	{"INSERT INTO \"users\" (\"name\") VALUES ($1) RETURNING \"id\"", Write},
	{"UPDATE t SET a = 1", Write},
	{"DELETE FROM t", Write},
	{"MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id)", Write},
	{"COPY t FROM STDIN", Write},
	{"COPY t TO STDOUT", Write},
	{"COPY (SELECT 1) TO STDOUT", Write},
	{"CREATE TABLE t (a int)", Write},
	{"CREATE UNLOGGED TABLE t (a int)", Write},
	{"CREATE TABLE measurements (temp numeric)", Write},
	{"CREATE INDEX CONCURRENTLY i ON t (a)", Write},
	{"CREATE OR REPLACE VIEW v AS SELECT 1", Write},
	{"ALTER TABLE t ADD COLUMN b int", Write},
	{"DROP TABLE t", Write},
	{"TRUNCATE t", Write},
	{"GRANT SELECT ON t TO app", Write},
	{"REVOKE ALL ON t FROM app", Write},
	{"COMMENT ON TABLE t IS 'x'", Write},
	{"VACUUM ANALYZE t", Write},
	{"ANALYZE t", Write},
	{"CLUSTER t", Write},
	{"REINDEX TABLE t", Write},
	{"REFRESH MATERIALIZED VIEW CONCURRENTLY mv", Write},
	{"CALL do_things(1)", Session},
	{"DO $$BEGIN PERFORM pg_advisory_lock(1); END$$", Session},
	{"NOTIFY chan, 'x'", Write},
	{"CHECKPOINT", Write},
	{"EXECUTE p(1)", Write},
	{"FETCH 10 FROM c", Write},
	{"CLOSE c", Write},
	{"SET LOCAL statement_timeout = '1s'", Write},
	{"SET CONSTRAINTS ALL DEFERRED", Write},
	// Custom settings whose prefix is one of those words: the session's.
	{"SET local.tenant = 'x'", Session},
	{"SET LOCAL local.tenant = 'x'", Write},
	{"SET transaction.tenant TO 'x'", Session},
	{"SET constraints . tenant = 'x'", Session},
	{"SET CONSTRAINTS c1, c2 IMMEDIATE", Write},
	{"SET TRANSACTION READ ONLY", Tx},
	// pg_settings' update rule calls set_config(…, false).
	{"UPDATE pg_settings SET setting = '1MB' WHERE name = 'work_mem'", Session},
	{`update pg_catalog."pg_settings" set setting = 'x' where name = 'work_mem'`, Session},
	{"WITH u AS (UPDATE pg_settings SET setting = 'x' RETURNING 1) SELECT * FROM u", Session},
	{"SELECT name, setting FROM pg_settings", Read},
	{"UPDATE t SET v = 1", Write},

	// Transaction control.
	{"BEGIN", Tx},
	{"BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY", Tx},
	{"START TRANSACTION READ ONLY", Tx},
	{"COMMIT", Tx},
	{"END", Tx},
	{"ROLLBACK", Tx},
	{"ABORT", Tx},
	{"SAVEPOINT s1", Tx},
	{"RELEASE SAVEPOINT s1", Tx},
	{"ROLLBACK TO SAVEPOINT s1", Tx},
	{"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", Tx},
	{"PREPARE TRANSACTION 'gid'", Tx},
	{"COMMIT PREPARED 'gid'", Tx},
	{"ROLLBACK PREPARED 'gid'", Tx},

	// Session state.
	{"SET search_path TO app, public", Session},
	{"SET statement_timeout = 0", Session},
	{"set session timezone = 'UTC'", Session},
	{"SET TIME ZONE 'UTC'", Session},
	{"SET ROLE admin", Session},
	{"SET SESSION AUTHORIZATION app", Session},
	{"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", Session},
	{"RESET ALL", Session},
	{"RESET search_path", Session},
	{"DISCARD ALL", Session},
	{"PREPARE p (int) AS SELECT * FROM t WHERE a = $1", Session},
	{"PREPARE transaction_q AS SELECT 1", Session},
	{"DEALLOCATE ALL", Session},
	{"DECLARE c CURSOR WITH HOLD FOR SELECT * FROM t", Session},
	{"LISTEN chan", Session},
	{"UNLISTEN *", Session},
	{"LOAD 'auto_explain'", Session},
	{"CREATE TEMP TABLE tmp (a int)", Session},
	{"CREATE TEMPORARY TABLE tmp AS SELECT 1", Session},
	{"CREATE LOCAL TEMPORARY TABLE tmp (a int)", Session},
	{"CREATE GLOBAL TEMP TABLE tmp (a int)", Session},
	{"CREATE TEMP VIEW v AS SELECT 1", Session},
	{"CREATE OR REPLACE TEMP VIEW v AS SELECT 1", Session},
	{"CREATE TEMP SEQUENCE s", Session},
	{"CREATE TABLE pg_temp.tmp (a int)", Session},
	{"CREATE TABLE \"pg_temp\".tmp (a int)", Session},
	{"CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'SELECT 1'", Session},

	// Multi-statement strings take the most dangerous part.
	{"SELECT 1; SELECT 2", Read},
	{"SELECT 1; INSERT INTO t VALUES (1)", Write},
	{"INSERT INTO t VALUES (1); SELECT 1", Write},
	{"SELECT 1; FROB", Unknown},
	{"INSERT INTO t VALUES (1); FROB", Unknown},
	{"SELECT 1 FOR UPDATE; FROB", Lock},
	{"BEGIN; SELECT * FROM t FOR UPDATE; COMMIT", Tx},
	{"BEGIN; SELECT 1; COMMIT", Tx},
	{"SET x = 1; BEGIN; SELECT 1; COMMIT", Session},
	{"SELECT 1;;; SELECT 2;", Read},
	{"SELECT 'a;b'; SELECT \"c;d\"; SELECT $$e;f$$", Read},
	{"SELECT 1; -- DELETE FROM t\nSELECT 2", Read},
	{"SELECT 1 /* ; DELETE */; SELECT 2", Read},

	// Empty input and statements.
	{"", Read},
	{"   ", Read},
	{";", Read},
	{" ; ; ", Read},
	{"-- only a comment", Read},
	{"/* only a comment */", Read},

	// Unknown and malformed input.
	{"FROB t", Unknown},
	{"'x'", Unknown},
	{"()", Unknown},
	{"42", Unknown},
	{"SELECT 'unterminated", Unknown},
	{"SELECT E'unterminated\\'", Unknown},
	{"SELECT \"unterminated", Unknown},
	{"SELECT $$unterminated", Unknown},
	{"SELECT $a$unterminated $A$", Unknown},
	{"SELECT 1 /* unterminated", Unknown},
	{"SELECT 1 /* nested /* only one closed */", Unknown},
	{"/* unterminated", Unknown},
	{"SELECT 1; SELECT 'oops", Unknown},

	// standard_conforming_strings: a backslash in a standard string is read
	// both ways.
	{"SELECT 'C:\\path\\file'", Read},
	{"SELECT '\\'; DELETE FROM t; --'", Write},
	{"SELECT 'a\\' ' , nextval(' s ') -- '", Write},
	{"SELECT 'a\\' ' , nextval(' s ') , '", Unknown},
	{"SELECT '\\' x", Unknown},
	{"SELECT b'\\' FROM t", Read},

	// SQL as ORMs write it.
	{`SELECT * FROM "users" WHERE "users"."id" = $1 AND "users"."deleted_at" IS NULL ORDER BY "users"."id" LIMIT 1`, Read},
	{`SELECT * FROM "users" WHERE "users"."deleted_at" IS NULL AND "id" = $1 ORDER BY "users"."id" LIMIT $2 FOR UPDATE`, Lock},
	{`INSERT INTO "users" ("created_at","updated_at","deleted_at","name","age") VALUES ($1,$2,$3,$4,$5) RETURNING "id"`, Write},
	{`UPDATE "users" SET "name"=$1,"updated_at"=$2 WHERE "users"."deleted_at" IS NULL AND "id" = $3`, Write},
	{`UPDATE "users" SET "deleted_at"=$1 WHERE "users"."id" = $2 AND "users"."deleted_at" IS NULL`, Write},
	{`SELECT count(*) FROM "orders" WHERE "orders"."user_id" IN ($1,$2,$3)`, Read},
	{`SELECT "users"."id", "users"."name", "users"."update" FROM "users" WHERE "users"."id" = $1 LIMIT 2`, Read},
	{`SELECT DISTINCT "t1"."id" FROM "pets" AS "t1" JOIN "users" AS "t2" ON "t1"."owner_id" = "t2"."id" WHERE "t2"."id" IN (SELECT "id" FROM "users" WHERE "age" > $1)`, Read},
	{`SELECT EXISTS (SELECT * FROM "users" WHERE "users"."name" = $1)`, Read},
	{`SELECT * FROM place ORDER BY telcode ASC`, Read},
	{`SELECT first_name, last_name FROM person WHERE first_name=$1`, Read},
	{`INSERT INTO person (first_name,last_name,email) VALUES (:first_name,:last_name,:email)`, Write},
	{`INSERT INTO "users" ("name") VALUES ($1) ON CONFLICT ("name") DO UPDATE SET "name" = "excluded"."name" RETURNING "id"`, Write},
	{`SELECT "id" FROM "jobs" WHERE "state" = 'queued' ORDER BY "id" LIMIT 1 FOR UPDATE SKIP LOCKED`, Lock},
	{`SAVEPOINT sp1`, Tx},

	// What PostgreSQL 16, 17 and 18 added (no new statement: their key
	// words start none; the text of each case runs on that version).
	// 16: SQL/JSON constructors and IS JSON, SYSTEM_USER, EXPLAIN
	// (GENERIC_PLAN), VACUUM's new options.
	{"SELECT JSON_OBJECT('a': 1, 'b' VALUE 2 ABSENT ON NULL WITH UNIQUE KEYS), JSON_ARRAY(1, 2 RETURNING jsonb), js IS JSON SCALAR, SYSTEM_USER FROM docs", Read},
	{"SELECT JSON_ARRAYAGG(a ORDER BY a), JSON_OBJECTAGG(k : v) FROM kv", Read},
	{"EXPLAIN (GENERIC_PLAN) SELECT * FROM t WHERE id = $1", Read},
	{"EXPLAIN (GENERIC_PLAN) UPDATE t SET a = $1", Write},
	{"VACUUM (BUFFER_USAGE_LIMIT '1MB', SKIP_DATABASE_STATS) t", Write},
	{"VACUUM (ONLY_DATABASE_STATS)", Write},
	// 17: MERGE … RETURNING (a write, in a WITH too), WHEN NOT MATCHED BY
	// SOURCE, JSON_TABLE and the SQL/JSON query functions, EXPLAIN
	// (SERIALIZE, MEMORY), COPY's ON_ERROR.
	{"MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET a = s.a WHEN NOT MATCHED BY SOURCE THEN DELETE RETURNING merge_action(), t.*", Write},
	{"WITH m AS (MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED BY TARGET THEN INSERT VALUES (s.id, s.a) RETURNING merge_action() AS action, t.id) SELECT * FROM m", Write},
	{"SELECT jt.* FROM docs, JSON_TABLE(docs.js, '$.items[*]' COLUMNS (n FOR ORDINALITY, name text PATH '$.name' DEFAULT 'x' ON EMPTY, NESTED PATH '$.tags[*]' COLUMNS (tag text PATH '$'))) AS jt", Read},
	{"SELECT JSON_QUERY(js, '$.a' RETURNING jsonb WITH CONDITIONAL WRAPPER KEEP QUOTES ON SCALAR STRING EMPTY ARRAY ON EMPTY ERROR ON ERROR), JSON_VALUE(js, '$.b' RETURNING int DEFAULT 0 ON ERROR), JSON_EXISTS(js, '$.c'), JSON_SCALAR(1), JSON_SERIALIZE(js RETURNING bytea), JSON('{}') FROM docs", Read},
	{"EXPLAIN (ANALYZE, SERIALIZE TEXT, MEMORY) SELECT * FROM t", Read},
	{"EXPLAIN (ANALYZE, MEMORY) MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE RETURNING t.id", Write},
	{"EXPLAIN MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE RETURNING t.id", Write},
	{"COPY t FROM STDIN (FORMAT csv, ON_ERROR ignore, LOG_VERBOSITY verbose)", Write},
	// 18: OLD and NEW in RETURNING, virtual generated columns, NOT
	// ENFORCED constraints, temporal keys (PERIOD), LARGE OBJECTS in
	// default privileges.
	{"UPDATE t SET a = a + 1 RETURNING old.a, new.a", Write},
	{"INSERT INTO t VALUES (1, 2) ON CONFLICT (id) DO UPDATE SET a = 3 RETURNING WITH (OLD AS o, NEW AS n) o.a, n.a", Write},
	{"WITH d AS (DELETE FROM t WHERE id = 1 RETURNING old.*) SELECT * FROM d", Write},
	{"CREATE TABLE g (a int, b int GENERATED ALWAYS AS (a * 2) VIRTUAL)", Write},
	{"CREATE TEMP TABLE g (a int, b int GENERATED ALWAYS AS (a * 2) VIRTUAL)", Session},
	{"ALTER TABLE t ADD CONSTRAINT c CHECK (a > 0) NOT ENFORCED", Write},
	{"CREATE TABLE bookings (room int, during tstzrange, PRIMARY KEY (room, during WITHOUT OVERLAPS), FOREIGN KEY (room, PERIOD during) REFERENCES rooms (id, PERIOD valid))", Write},
	{"ALTER DEFAULT PRIVILEGES GRANT SELECT ON LARGE OBJECTS TO PUBLIC", Write},
}

func TestClassify(t *testing.T) {
	if len(classifyTests) < 120 {
		t.Fatalf("only %d cases", len(classifyTests))
	}
	seen := map[string]bool{}
	for _, tt := range classifyTests {
		if seen[tt.sql] {
			t.Errorf("duplicate case %q", tt.sql)
		}
		seen[tt.sql] = true
		if got := Classify(tt.sql).Class; got != tt.want {
			t.Errorf("Classify(%q).Class = %v, want %v", tt.sql, got, tt.want)
		}
	}
}

func TestClassifyHint(t *testing.T) {
	tests := []struct {
		sql  string
		hint Hint
		want Class
	}{
		{"/* pgrouted:primary */ SELECT 1", HintPrimary, Read},
		{"/* pgrouted:replica */ SELECT 1", HintReplica, Read},
		{"/*pgrouted:replica*/SELECT 1", HintReplica, Read},
		{"  \n/*  PGROUTED:Primary\t*/ SELECT 1", HintPrimary, Read},
		{"-- pgrouted:replica\nSELECT 1", HintReplica, Read},
		{"/* traceparent='00-abc' */ /* pgrouted:replica */ SELECT 1", HintReplica, Read},
		{"-- app: billing\n/* pgrouted:primary */\nSELECT 1", HintPrimary, Read},
		{"/* pgrouted:replica */ /* pgrouted:primary */ SELECT 1", HintPrimary, Read},
		{"/* pgrouted:primary */ /* pgrouted:replica */ SELECT 1", HintPrimary, Read},
		{"/* pgrouted:replica */ DELETE FROM t", HintReplica, Write},
		{"/* pgrouted:replica */ SELECT 1 FOR UPDATE", HintReplica, Lock},
		{"/* pgrouted:replica */", HintReplica, Read},
		{"SELECT 1 /* pgrouted:replica */", NoHint, Read},
		{"SELECT 1; /* pgrouted:replica */ SELECT 2", NoHint, Read},
		{"( /* pgrouted:replica */ SELECT 1)", NoHint, Read},
		{"/* pgrouted:replicas */ SELECT 1", NoHint, Read},
		{"/* pgrouted: replica */ SELECT 1", NoHint, Read},
		{"/* pgrouted:replica, please */ SELECT 1", NoHint, Read},
		{"/* /* pgrouted:replica */ */ SELECT 1", NoHint, Read},
		{"'/* pgrouted:replica */' SELECT 1", NoHint, Unknown},
		{"/* pgrouted:primary", NoHint, Unknown},
		{"SELECT 1", NoHint, Read},
	}
	for _, tt := range tests {
		r := Classify(tt.sql)
		if r.Hint != tt.hint || r.Class != tt.want {
			t.Errorf("Classify(%q) = {Class: %v, Hint: %v}, want {Class: %v, Hint: %v}", tt.sql, r.Class, r.Hint, tt.want, tt.hint)
		}
	}
}

func TestClassifyStatements(t *testing.T) {
	tests := []struct {
		sql  string
		n    int
		has  []Class
		want Class
	}{
		{"", 0, nil, Read},
		{";;", 0, nil, Read},
		{"SELECT 1", 1, []Class{Read}, Read},
		{"SELECT 1;", 1, []Class{Read}, Read},
		{"SELECT 1; SELECT 2", 2, []Class{Read}, Read},
		{"BEGIN; SET x = 1; SELECT 1; COMMIT;", 4, []Class{Tx, Session, Read}, Session},
		{"INSERT INTO t VALUES (1); SELECT 1 FOR UPDATE", 2, []Class{Write, Lock}, Lock},
		{"SELECT 1; SELECT 'x", 2, []Class{Read, Unknown}, Unknown},
	}
	for _, tt := range tests {
		r := Classify(tt.sql)
		if r.Statements != tt.n || r.Class != tt.want {
			t.Errorf("Classify(%q) = {Class: %v, Statements: %d}, want {Class: %v, Statements: %d}", tt.sql, r.Class, r.Statements, tt.want, tt.n)
		}
		for c := Class(0); c < numClasses; c++ {
			want := false
			for _, h := range tt.has {
				want = want || h == c
			}
			if r.Has(c) != want {
				t.Errorf("Classify(%q).Has(%v) = %v, want %v", tt.sql, c, r.Has(c), want)
			}
		}
	}
}

func TestClassifyDML(t *testing.T) {
	for sql, want := range map[string]bool{
		"INSERT INTO t VALUES ($1)":                                    true,
		"/* c */ update t set a = 1;":                                  true,
		"DELETE FROM t RETURNING id":                                   true,
		"MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE": true,
		"WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d":        true,
		"WITH x AS (SELECT 1) SELECT * FROM x":                         false, // a read
		"COPY t FROM STDIN":                                            false,
		"CALL p()":                                                     false,
		"CREATE TABLE t (id int)":                                      false,
		"INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)":           false,
		"INSERT INTO t SELECT pg_advisory_lock(1)":                     false, // session state
		"BEGIN":               false,
		"SELECT nextval('s')": false,
		"INSERT INTO t VALUES ('a\\'); DROP TABLE t; --')": false,
	} {
		if got := Classify(sql).DML; got != want {
			t.Errorf("Classify(%q).DML = %v, want %v", sql, got, want)
		}
	}
}

func TestClassOrder(t *testing.T) {
	order := []Class{Read, Write, Unknown, Lock, Tx, Session}
	for i := 1; i < len(order); i++ {
		if a, b := order[i-1], order[i]; a.max(b) != b || b.max(a) != b {
			t.Errorf("%v is not less dangerous than %v", a, b)
		}
	}
	var zero Class
	if zero != Unknown {
		t.Errorf("zero Class is %v, want unknown", zero)
	}
	for c, want := range map[Class]string{Unknown: "unknown", Read: "read", Write: "write", Lock: "lock", Tx: "tx", Session: "session", 42: "Class(42)"} {
		if got := c.String(); got != want {
			t.Errorf("Class(%d).String() = %q, want %q", c, got, want)
		}
	}
	for h, want := range map[Hint]string{NoHint: "none", HintPrimary: "primary", HintReplica: "replica", 9: "Hint(9)"} {
		if got := h.String(); got != want {
			t.Errorf("Hint(%d).String() = %q, want %q", h, got, want)
		}
	}
}

// ormQueries are typical statements of ORM-generated traffic, for the
// benchmark and the allocation test.
var ormQueries = []string{
	`SELECT * FROM "users" WHERE "users"."id" = $1 AND "users"."deleted_at" IS NULL ORDER BY "users"."id" LIMIT 1`,
	`INSERT INTO "users" ("created_at","updated_at","deleted_at","name","age") VALUES ($1,$2,$3,$4,$5) RETURNING "id"`,
	`UPDATE "users" SET "name"=$1,"updated_at"=$2 WHERE "users"."deleted_at" IS NULL AND "id" = $3`,
	`SELECT "users"."id", "users"."name", "users"."age" FROM "users" WHERE "users"."id" IN ($1, $2, $3) LIMIT 10`,
	`SELECT count(*) FROM "orders" WHERE "orders"."user_id" = $1 AND "orders"."status" = 'paid'`,
	`SELECT * FROM "jobs" WHERE "state" = $1 ORDER BY "id" LIMIT 1 FOR UPDATE SKIP LOCKED`,
	`DELETE FROM "sessions" WHERE "expires_at" < $1`,
	`/* pgrouted:replica */ SELECT id, name FROM place ORDER BY telcode ASC`,
}

func TestClassifyDoesNotAllocate(t *testing.T) {
	long := "SELECT pg_logical_slot_get_binary_changes('s', NULL, NULL), " +
		"pg_replication_origin_session_progress(true) FROM t"
	for _, q := range append(ormQueries, long) {
		if n := testing.AllocsPerRun(100, func() { Classify(q) }); n != 0 {
			t.Errorf("Classify(%q) allocates %v times", q, n)
		}
	}
}

func BenchmarkClassify(b *testing.B) {
	total := 0
	for _, q := range ormQueries {
		total += len(q)
	}
	b.SetBytes(int64(total / len(ormQueries)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		Classify(ormQueries[i%len(ormQueries)])
	}
}

func BenchmarkClassifyLong(b *testing.B) {
	q := strings.Repeat(`SELECT "a"."id", "a"."name" FROM "a" JOIN "b" ON "a"."id" = "b"."a_id" WHERE "b"."x" = $1 UNION ALL `, 20) + "SELECT 1, 'x'"
	b.SetBytes(int64(len(q)))
	b.ReportAllocs()
	for b.Loop() {
		Classify(q)
	}
}

// TestFuncClass holds funcClass to the list in the package documentation.
func TestFuncClass(t *testing.T) {
	session := []string{"set_config", "dblink_connect", "dblink_connect_u", "dblink", "dblink_exec",
		"dblink_open", "dblink_fetch", "dblink_send_query", "dblink_disconnect", "setseed",
		"query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema", "cursor_to_xml",
		"pg_advisory_lock", "pg_advisory_lock_shared", "pg_advisory_xact_lock",
		"pg_advisory_xact_lock_shared", "pg_try_advisory_lock", "pg_try_advisory_lock_shared",
		"pg_try_advisory_xact_lock", "pg_try_advisory_xact_lock_shared", "pg_advisory_unlock",
		"pg_advisory_unlock_shared", "pg_advisory_unlock_all",
		"pg_replication_origin_session_setup", "pg_replication_origin_session_progress",
		"binary_upgrade_set_next_pg_type_oid", "binary_upgrade_set_next_multirange_array_pg_type_oid",
		"binary_upgrade_create_empty_extension", "binary_upgrade_logical_slot_has_caught_up",
		"ts_stat", "ts_rewrite", "set_limit", "isn_weak", "crosstab", "crosstab2", "crosstab3", "crosstab4", "connectby"}
	write := []string{"nextval", "setval", "currval", "lastval", "pg_notify",
		"lo_creat", "lo_create", "lo_from_bytea", "lo_import", "lo_export", "lo_open", "lo_put",
		"lo_unlink", "lowrite", "lo_truncate", "lo_truncate64",
		"txid_current", "pg_current_xact_id", "pg_current_wal_lsn", "pg_current_wal_insert_lsn",
		"pg_current_wal_flush_lsn", "pg_switch_wal", "pg_switch_xlog", "pg_create_restore_point",
		"pg_create_physical_replication_slot", "pg_create_logical_replication_slot",
		"pg_drop_replication_slot", "pg_copy_physical_replication_slot",
		"pg_copy_logical_replication_slot", "pg_replication_slot_advance",
		"pg_logical_slot_get_changes", "pg_logical_slot_get_binary_changes",
		"pg_logical_slot_peek_changes", "pg_logical_slot_peek_binary_changes",
		"pg_logical_emit_message", "pg_replication_origin_create", "pg_replication_origin_advance",
		"pg_backup_start", "pg_backup_stop", "pg_start_backup", "pg_stop_backup",
		"pg_terminate_backend", "pg_cancel_backend", "pg_promote", "pg_reload_conf",
		"pg_rotate_logfile", "pg_stat_reset", "pg_stat_reset_shared", "pg_stat_reset_single_table_counters",
		"pg_stat_reset_single_function_counters", "pg_stat_reset_slru", "pg_stat_statements_reset",
		"pg_log_standby_snapshot", "pg_log_backend_memory_contexts", "brin_summarize_range",
		"brin_summarize_new_values", "brin_desummarize_range", "gin_clean_pending_list",
		"pg_import_system_collations", "pg_wal_replay_pause", "pg_wal_replay_resume",
		"pg_sync_replication_slots", "pg_rotate_logfile_old", "pg_nextoid", "pg_stop_making_pinned_objects",
		"pg_extension_config_dump", "pg_restore_relation_stats", "pg_restore_attribute_stats",
		"pg_clear_relation_stats", "pg_clear_attribute_stats"}
	read := []string{"count", "now", "coalesce", "lower", "pg_is_in_recovery", "txid_current_if_assigned",
		"pg_current_xact_id_if_assigned", "lo_get", "loread", "lo_close", "lo_lseek64", "lo_tell",
		"pg_is_wal_replay_paused", "pg_get_wal_replay_pause_state", "pg_wal_replay", "pg_export_snapshot",
		"pg_stat_clear_snapshot", "pg_stat_force_next_flush", "pg_sequence_last_value", "binary_upgrade",
		"binaryupgrade_x", "pg_restore", "pg_clear", "pg_logical",
		"current_setting", "pg_sleep", "pg_stat_get_live_tuples", "random", "brin_page_items", "nextval_x", "set_configs", "pg_advisory", "pg_temp", ""}
	check := func(names []string, want Class) {
		for _, name := range names {
			for _, n := range []string{name, strings.ToUpper(name)} {
				if got := funcClass(n); got != want {
					t.Errorf("funcClass(%q) = %v, want %v", n, got, want)
				}
			}
		}
	}
	check(session, Session)
	check(write, Write)
	check(read, Read)
}

func TestBodyKeyword(t *testing.T) {
	for _, w := range []string{"insert", "UPDATE", "Delete", "merge", "into", "for", "share", "no", "key",
		"table", "temp", "TEMPORARY", "unlogged", "select", "nope", "keys", "t", "", "updated", "temporary_x",
		"local", "GLOBAL", "globals", "localtime"} {
		want := keywordOf(w)
		switch want {
		case kwInsert, kwUpdate, kwDelete, kwMerge, kwInto, kwFor, kwLockStrength, kwTable, kwTemp, kwUnlogged,
			kwLocal, kwGlobal:
		default:
			want = kwNone
		}
		if got := bodyKeyword(w); got != want {
			t.Errorf("bodyKeyword(%q) = %v, want %v", w, got, want)
		}
	}
}
