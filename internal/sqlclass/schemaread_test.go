package sqlclass

import "testing"

func TestSchemaRead(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		want bool
	}{
		// goose (postgres dialect)
		{`SELECT version_id, is_applied from goose_db_version ORDER BY id DESC`, true},
		{`SELECT tstamp, is_applied FROM goose_db_version WHERE version_id=$1 ORDER BY tstamp DESC LIMIT 1`, true},
		{`SELECT max(version_id) FROM public.goose_db_version`, true},
		{`SELECT EXISTS ( SELECT 1 FROM pg_tables WHERE (current_schema() IS NULL OR schemaname = current_schema()) AND tablename = 'goose_db_version' )`, true},
		// golang-migrate
		{`SELECT version, dirty FROM "public"."schema_migrations" LIMIT 1`, true},
		{`SELECT COUNT(1) FROM information_schema.tables WHERE table_schema = $1 AND table_name = $2 LIMIT 1`, true},
		{`SELECT version FROM SCHEMA_MIGRATIONS`, true},
		// GORM, ent
		{`SELECT count(*) FROM information_schema.tables WHERE table_schema = CURRENT_SCHEMA() AND table_name = $1 AND table_type = $2`, true},
		{`SELECT COUNT(*) FROM "INFORMATION_SCHEMA"."TABLES"`, false}, // quoted upper case names no schema PostgreSQL has
		{`SELECT COUNT(*) FROM INFORMATION_SCHEMA.TABLES WHERE "table_schema" = CURRENT_SCHEMA()`, true},
		{`SELECT c.relname FROM pg_catalog.pg_class c`, true},
		{`SELECT * FROM "pg_catalog"."pg_class"`, true},
		{`SELECT n.nspname FROM x JOIN pg_namespace n ON true`, true},
		{`SELECT count(*) FROM pg_stat_activity`, true},
		// not schema reads
		{`SELECT 1`, false},
		{`SELECT * FROM users WHERE name = 'goose_db_version'`, false},
		{`SELECT * FROM users /* schema_migrations */`, false},
		{`SELECT * FROM "Goose_db_version"`, false},
		{`SELECT pg_catalog.now()`, false},
		{`SELECT * FROM pg_last_wal_replay_lsn() AS r`, false},
		{`SELECT '0/0'::pg_lsn`, false},
		{`SELECT pg_is_in_recovery(), pg_size_pretty(1)`, false},
		{`SELECT id FROM orders WHERE pg_kind = 1`, false},
		{`SELECT schema_migrations_count FROM stats`, false},
		{`SELECT * FROM my_schema_migrations`, false},
		{`SELECT * FROM t $$pg_catalog.pg_class$$`, false},
	} {
		if got := SchemaRead(tc.sql); got != tc.want {
			t.Errorf("SchemaRead(%q) = %v, want %v", tc.sql, got, tc.want)
		}
	}
}

func BenchmarkSchemaRead(b *testing.B) {
	for _, q := range []string{
		"SELECT id, name, email FROM users WHERE id = $1",
		"SELECT version_id, is_applied from goose_db_version ORDER BY id DESC",
	} {
		b.Run(q[:20], func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				SchemaRead(q)
			}
		})
	}
}
