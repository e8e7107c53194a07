package sqlclass

import (
	"slices"
	"testing"
)

// relCatalog is a catalog with functions of pg_catalog and a user schema,
// and relations of every kind the scope cares about.
func relCatalog() *Functions {
	f := NewFunctions([]FuncDef{
		{Schema: "pg_catalog", Name: "count"},
		{Schema: "pg_catalog", Name: "now", Volatile: false},
		{Schema: "pg_catalog", Name: "lower"},
		{Schema: "pg_catalog", Name: "generate_series"},
		{Schema: "pg_catalog", Name: "query_to_xml"},
		{Schema: "public", Name: "order_total"}, // a STABLE user function
	}, nil, nil)
	f.SetRelations([]RelDef{
		{Name: "orders", Kind: 'r'},
		{Name: "products", Kind: 'r'},
		{Name: "users", Kind: 'r'},
		{Name: "audited", Kind: 'r', Triggers: true},
		{Name: "ruled", Kind: 'r', Rules: true},
		{Name: "parents", Kind: 'r', Cascades: true},
		{Name: "children", Kind: 'r'},
		{Name: "order_view", Kind: 'v'},
		{Name: "remote", Kind: 'f'},
		{Name: "measures", Kind: 'p'},
		{Name: "measures_2026", Kind: 'r', Parents: []string{"measures"}},
		{Name: "base", Kind: 'r'},
		{Name: "derived", Kind: 'r', Parents: []string{"base"}},
		{Name: "trig_part", Kind: 'r', Triggers: true, Parents: []string{"tpart"}},
		{Name: "tpart", Kind: 'p'},
		{Name: "Mixed", Kind: 'r'},
	})
	return f
}

// scopeOf is s's keys, or nil for every relation.
func scopeOf(s Scope) []uint32 {
	if !s.Named {
		return nil
	}
	return append([]uint32{}, s.Keys[:s.N]...)
}

func keysOf(names ...string) []uint32 {
	out := []uint32{}
	for _, n := range names {
		out = append(out, RelationKey(n))
	}
	return out
}

// TestScopes: what a statement reads and writes, relation by relation,
// and every case the text does not tell counts for every relation.
func TestScopes(t *testing.T) {
	fn := relCatalog()
	all := []uint32(nil)
	for _, tc := range []struct {
		sql           string
		reads, writes []uint32 // nil: every relation
	}{
		// Reads.
		{"SELECT * FROM orders WHERE id = $1", keysOf("orders"), all},
		{`SELECT "products"."id", count(*) FROM "products" GROUP BY 1`, keysOf("products"), all},
		{"SELECT * FROM public.orders o JOIN shop.products p ON p.id = o.product_id", keysOf("orders", "products"), all},
		{"SELECT * FROM orders, products WHERE true", keysOf("orders", "products"), all},
		{"SELECT * FROM orders a JOIN products b ON a.x = b.y, users WHERE true", keysOf("orders", "products", "users"), all},
		{"SELECT * FROM orders a JOIN (products b JOIN users c ON true) ON true", keysOf("orders", "products", "users"), all},
		{"SELECT (SELECT count(*) FROM orders), lower(name) FROM users", keysOf("orders", "users"), all},
		{"SELECT * FROM users WHERE id IN (SELECT user_id FROM orders)", keysOf("users", "orders"), all},
		{"WITH o AS (SELECT * FROM orders) SELECT * FROM o", keysOf("orders", "o"), all},
		{"SELECT * FROM ONLY orders", keysOf("orders"), all},
		{"SELECT * FROM orders UNION SELECT * FROM products", keysOf("orders", "products"), all},
		{"TABLE orders", keysOf("orders"), all},
		{"SELECT 1", []uint32{}, all},
		{"SELECT now()", []uint32{}, all},
		{"SELECT * FROM measures_2026", keysOf("measures"), all}, // a partition: its group's key
		{"SELECT * FROM derived", keysOf("base"), all},
		{`SELECT * FROM "Mixed"`, keysOf("Mixed"), all},
		{"SELECT * FROM mixed", keysOf("mixed"), all},
		{"SELECT * FROM brand_new_table", keysOf("brand_new_table"), all},
		{"SELECT * FROM orders a, products b, users c, children d, parents e", all, all}, // more than maxScopeKeys
		// Reads the text does not tell.
		{"SELECT * FROM order_view", all, all},
		{"SELECT * FROM remote", all, all},
		{"SELECT * FROM generate_series(1, 3)", all, all},
		{"SELECT order_total(id) FROM orders", all, all},
		{"SELECT public.lower(x) FROM orders", all, all},
		{"SELECT query_to_xml('select * from orders', true, true, '')", all, all},
		{`SELECT * FROM U&"orders"`, all, all},
		{"SELECT 1; SELECT * FROM orders", all, all},
		// Writes.
		{"INSERT INTO orders (a, b) VALUES ($1, $2) RETURNING id", all, keysOf("orders")},
		{`INSERT INTO "orders" AS o (a) SELECT a FROM products ON CONFLICT (a) DO UPDATE SET a = 1`, all, keysOf("orders")},
		{"UPDATE orders SET total = 1 FROM products WHERE true", all, keysOf("orders")},
		{"UPDATE ONLY public.orders SET total = 1", all, keysOf("orders")},
		{"DELETE FROM orders USING products WHERE true", all, keysOf("orders")},
		{"MERGE INTO orders o USING products p ON o.id = p.id WHEN MATCHED THEN UPDATE SET a = 1 WHEN NOT MATCHED THEN INSERT (a) VALUES (1)", all, keysOf("orders")},
		{"INSERT INTO measures VALUES (1)", all, keysOf("measures")},
		{"INSERT INTO measures_2026 VALUES (1)", all, keysOf("measures")},
		// Writes that count for every relation.
		{"INSERT INTO audited VALUES (1)", all, all},
		{"INSERT INTO ruled VALUES (1)", all, all},
		{"DELETE FROM parents WHERE id = 1", all, all},
		{"INSERT INTO tpart VALUES (1)", all, all}, // a partition has triggers
		{"INSERT INTO order_view VALUES (1)", all, all},
		{"INSERT INTO brand_new_table VALUES (1)", all, all},
		{"INSERT INTO orders VALUES (order_total(1))", all, all},
		{"WITH d AS (DELETE FROM products RETURNING *) INSERT INTO orders SELECT * FROM d", all, all},
		{"WITH p AS (SELECT 1) INSERT INTO orders SELECT * FROM p", all, all},
		{"INSERT INTO orders VALUES (1); INSERT INTO products VALUES (1)", all, all},
		{"COPY orders FROM STDIN", all, all},
		{"CREATE TABLE t (a int)", all, all},
		{"SELECT * INTO newt FROM orders", all, all},
	} {
		r := ClassifyWith(tc.sql, fn)
		if got := scopeOf(r.Reads); !slices.Equal(got, tc.reads) {
			t.Errorf("%s: reads %v, want %v", tc.sql, got, tc.reads)
		}
		if got := scopeOf(r.Writes); !slices.Equal(got, tc.writes) {
			t.Errorf("%s: writes %v, want %v", tc.sql, got, tc.writes)
		}
	}
}

// TestScopesWithoutCatalog: before the relations are known, everything
// counts for every relation.
func TestScopesWithoutCatalog(t *testing.T) {
	f := NewFunctions([]FuncDef{{Schema: "pg_catalog", Name: "count"}}, nil, nil)
	for _, q := range []string{"SELECT * FROM orders", "INSERT INTO orders VALUES (1)"} {
		if r := ClassifyWith(q, f); r.Reads.Named || r.Writes.Named {
			t.Errorf("%s without relations: %+v %+v, want every relation", q, r.Reads, r.Writes)
		}
	}
}

// TestScopesAllocateNothing: the scan of a statement's relations does not
// allocate.
func TestScopesAllocateNothing(t *testing.T) {
	fn := relCatalog()
	for _, q := range []string{
		"SELECT * FROM public.orders o JOIN products p ON p.id = o.product_id",
		"INSERT INTO orders (a, b) VALUES ($1, $2) RETURNING id",
	} {
		if n := testing.AllocsPerRun(100, func() { ClassifyWith(q, fn) }); n != 0 {
			t.Errorf("%s: %v allocations", q, n)
		}
	}
}
