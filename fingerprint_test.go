//go:build unix

package pgrouted_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// sessionFingerprint reads what a session keeps between statements: the
// settings whose source is the session, the custom settings named in
// custom (pg_settings leaves custom ones out: they are read by name), the
// channels it listens on, its prepared statements, its open cursors, the
// advisory locks its backend holds and its temporary relations.
func sessionFingerprint(custom []string) string {
	quoted := make([]string, len(custom))
	for i, n := range custom {
		quoted[i] = "'" + strings.ReplaceAll(n, "'", "''") + "'"
	}
	return strings.Replace(fingerprintQuery, "$custom", strings.Join(quoted, ", "), 1)
}

// customSetting finds the names of custom settings (two or more dotted
// parts) in SQL text: quoted ('app.tenant') or after SET or RESET.
var customSetting = regexp.MustCompile(`(?i)(?:'|\bset\s+|\breset\s+)([a-z_][a-z0-9_$]*(?:\s*\.\s*[a-z_][a-z0-9_$]*)+)`)

// customSettings returns the custom setting names texts mention, folded
// and sorted, each once.
func customSettings(texts ...string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range texts {
		for _, m := range customSetting.FindAllStringSubmatch(s, -1) {
			n := strings.ToLower(strings.Join(strings.Fields(m[1]), ""))
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

const fingerprintQuery = `SELECT pg_catalog.concat_ws(E'\n',
 (SELECT string_agg(name || '=' || coalesce(setting, ''), ',' ORDER BY name) FROM pg_catalog.pg_settings WHERE source = 'session'),
 (SELECT string_agg(n || '=' || coalesce(pg_catalog.current_setting(n, true), ''), ',' ORDER BY n) FROM pg_catalog.unnest(ARRAY[$custom]::text[]) n),
 (SELECT string_agg(c, ',' ORDER BY c) FROM pg_catalog.pg_listening_channels() c),
 (SELECT string_agg(name, ',' ORDER BY name) FROM pg_catalog.pg_prepared_statements),
 (SELECT string_agg(name, ',' ORDER BY name) FROM pg_catalog.pg_cursors),
 (SELECT string_agg(classid || '/' || objid || '/' || objsubid || '/' || mode, ',' ORDER BY classid, objid, objsubid, mode)
    FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid()),
 (SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_catalog.pg_class WHERE relnamespace = pg_catalog.pg_my_temp_schema()))`

// fingerprintWrappers put a statement of the hidden-code corpus in other
// places a read can hold it.
var fingerprintWrappers = []string{
	"%s",
	"EXPLAIN %s",
	"SELECT * FROM (%s) q",
	"WITH q AS (%s) SELECT * FROM q",
	"%s UNION ALL %[1]s",
	"/* c */ (%s)",
	"SELECT 1; %s",
	"SELECT (SELECT count(*) FROM (%s) q)",
}

// fingerprintExtra names the hidden-code objects in further places.
var fingerprintExtra = []string{
	"SELECT x OPERATOR(hid.##@) 1 FROM hid.t",
	"SELECT x FROM hid.t ORDER BY x OPERATOR(hid.##@) 1",
	"SELECT ARRAY[5]::hid.leaky_dom[]",
	"SELECT hid.leaky_sum(x) OVER () FROM hid.t",
	"SELECT x FROM hid.t WHERE x = ANY(SELECT m FROM hid.leaky_view)",
	"TABLE hid.leaky_view",
	"VALUES (5::hid.leaky_dom)",
	"SELECT hid.t.hid_leaky_attr FROM hid.t",
	"SELECT (t).hid_leaky_attr FROM hid.t t",
	"SELECT '5'::hid.nested_dom",
	"SELECT CAST('5' AS hid.op_dom)",
	"SELECT x FROM hid.t WHERE (x::hid.pair).v > 0",
	"SELECT m FROM hid.config_view LIMIT 1",
	"SELECT * FROM hid.view_of_leaky, hid.t",
	"SELECT * FROM hid.t JOIN hid.leaky_view ON true",
}

// TestSessionFingerprint: every statement of a corpus (the classification
// tables and fuzz corpus of internal/sqlclass, and the hidden-code objects
// in several places) that the router would send to a replica leaves a
// replica session as it found it: the session's fingerprint
// (sessionFingerprint) read before and after it, on one scratch connection
// to a replica, is the same. It reports how many statements it ran.
func TestSessionFingerprint(t *testing.T) {
	ctx := testCtx(t)
	cases := setupHidden(t, ctx)
	_, conn, _ := open(t)
	waitCatalogKnows(t, conn, "SELECT 5::hid.safe_dom")

	b, err := os.ReadFile("internal/sqlclass/testdata/statements.json")
	if err != nil {
		t.Fatal(err)
	}
	var stmts []string
	if err := json.Unmarshal(b, &stmts); err != nil {
		t.Fatal(err)
	}
	lexical := len(stmts)
	for _, c := range cases {
		for _, w := range fingerprintWrappers {
			stmts = append(stmts, fmt.Sprintf(w, c.leaky), fmt.Sprintf(w, c.safe))
		}
	}
	stmts = append(stmts, fingerprintExtra...)
	custom := customSettings(append([]string{hiddenSetup, "'fp.control'"}, stmts...)...)
	query := sessionFingerprint(custom)

	replica := cluster.Replicas()[0]
	var scratch *pgx.Conn
	var before string
	reconnect := func() {
		t.Helper()
		if scratch != nil {
			scratch.Close(ctx)
		}
		var err error
		if scratch, err = replica.Connect(ctx); err != nil {
			t.Fatal(err)
		}
		if err := scratch.PgConn().Exec(ctx, "SET statement_timeout = '3s'").Close(); err != nil {
			t.Fatal(err)
		}
		if err := scratch.QueryRow(ctx, query, pgx.QueryExecModeSimpleProtocol).Scan(&before); err != nil {
			t.Fatal(err)
		}
	}
	reconnect()
	defer func() { scratch.Close(context.Background()) }()
	fingerprint := func() (string, error) {
		var fp string
		err := scratch.QueryRow(ctx, query, pgx.QueryExecModeSimpleProtocol).Scan(&fp)
		return fp, err
	}

	// The fingerprint sees a change: a statement that changes the session,
	// run on the scratch connection whatever the router says of it.
	if err := scratch.PgConn().Exec(ctx, "SELECT set_config('fp.control', 'x', false)").Close(); err != nil {
		t.Fatal(err)
	}
	if fp, err := fingerprint(); err != nil || fp == before {
		t.Fatalf("the fingerprint did not change after set_config: %q, %v", fp, err)
	}
	reconnect()

	var onReplica, failed, changed int
	for _, s := range stmts {
		d, err := conn.Explain(ctx, s)
		if err != nil || d.Primary {
			continue
		}
		onReplica++
		if err := scratch.PgConn().Exec(ctx, s).Close(); err != nil {
			failed++
		}
		after, err := fingerprint()
		if err != nil {
			// The statement left the connection unusable: a new one.
			reconnect()
			continue
		}
		if after != before {
			changed++
			t.Errorf("sent to a replica (%s), %q changed the session:\nbefore %q\nafter  %q", d.Reason, s, before, after)
			reconnect()
		}
	}
	t.Logf("%d statements (%d of the lexical corpus, %d of hidden code), %d custom settings watched: %d sent to a replica and run there (%d failed there), %d changed the session",
		len(stmts), lexical, len(stmts)-lexical, len(custom), onReplica, failed, changed)
	if onReplica < len(cases)*len(fingerprintWrappers)/2 {
		t.Errorf("only %d statements would go to a replica: the check proves little", onReplica)
	}
	if !strings.Contains(before, "statement_timeout") {
		t.Errorf("the fingerprint %q misses the session's statement_timeout", before)
	}
}
