package otelroute

import "testing"

func TestSummarize(t *testing.T) {
	for _, tc := range []struct{ query, op, summary string }{
		{"SELECT * FROM wuser_table WHERE username = $1", "SELECT", "SELECT wuser_table"},
		{"INSERT INTO shipping_details (order_id, address) SELECT order_id, address FROM orders WHERE order_id = $1", "INSERT", "INSERT shipping_details SELECT orders"},
		{"select * from songs, artists where songs.artist_id = artists.id", "select", "select songs artists"},
		{"SELECT order_date FROM (SELECT * FROM orders o JOIN customers c ON o.customer_id = c.customer_id) x", "SELECT", "SELECT SELECT orders customers"},
		{`SELECT * FROM "song list", public."Artists"`, "SELECT", `SELECT "song list" public."Artists"`},
		{"UPDATE accounts SET balance = 0 WHERE id = 'x FROM secret'", "UPDATE", "UPDATE accounts"},
		{"DELETE FROM only_t USING other WHERE only_t.id = other.id", "DELETE", "DELETE only_t other"},
		{"WITH w AS (DELETE FROM q RETURNING *) INSERT INTO log SELECT * FROM w", "INSERT", "DELETE q INSERT log SELECT w"},
		{"SELECT id FROM t FOR UPDATE", "SELECT", "SELECT t"},
		{"INSERT INTO t VALUES (1) ON CONFLICT (id) DO UPDATE SET v = 2", "INSERT", "INSERT t"},
		{"/* pgrouted:replica */ SELECT pg_sleep(1) -- FROM nothing", "SELECT", "SELECT"},
		{"SELECT g FROM generate_series(1, 3) g", "SELECT", "SELECT"},
		{"SELECT $$ FROM x $$, $tag$ INSERT INTO y $tag$", "SELECT", "SELECT"},
		{"BEGIN", "BEGIN", "BEGIN"},
		{"CREATE TABLE t (id int)", "CREATE", "CREATE t"},
		{"TRUNCATE big", "TRUNCATE", "TRUNCATE big"},
		{"SELECT 1; SELECT 2 FROM t", "", "SELECT SELECT t"},
		{"", "", ""},
	} {
		op, sum := summarize(tc.query)
		if op != tc.op || sum != tc.summary {
			t.Errorf("%q: %q, %q; want %q, %q", tc.query, op, sum, tc.op, tc.summary)
		}
	}
	long := "SELECT * FROM "
	for i := 0; i < 100; i++ {
		if i > 0 {
			long += ", "
		}
		long += "table_number_" + string(rune('a'+i%26))
	}
	if _, sum := summarize(long); len(sum) > maxSummary || sum[len(sum)-1] == '_' {
		t.Errorf("a long summary: %d bytes: %q", len(sum), sum)
	}
}

func TestOperationOfAllocatesNothing(t *testing.T) {
	q := `WITH w AS (SELECT * FROM "users" u WHERE u.id = $1) select w.id FROM w JOIN orders o ON o.uid = w.id`
	if op, _ := operationOf(q); op != "select" {
		t.Fatalf("operation %q", op)
	}
	if n := testing.AllocsPerRun(100, func() { operationOf(q) }); n != 0 {
		t.Errorf("operationOf: %v allocations", n)
	}
}
