package pgrouted

import (
	"strconv"
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

func TestClassCache(t *testing.T) {
	cc := newClassCache()
	a := sqlclass.NewFunctions(nil, nil, nil)
	b := sqlclass.NewFunctions(nil, nil, nil)
	const q = `SELECT * FROM t WHERE id = $1 FOR UPDATE`
	if _, ok := lookup(cc, q, a); ok {
		t.Fatal("an empty cache found a text")
	}
	want := sqlclass.ClassifyWith(q, a)
	cc.put(q, a, want)
	if got, ok := lookup(cc, q, a); !ok || got != want {
		t.Fatalf("get after put: %+v, %v; want %+v", got, ok, want)
	}
	if _, ok := lookup(cc, q, b); ok {
		t.Fatal("a classification made under one catalog snapshot was found under another")
	}
	if _, ok := lookup(cc, q+" ", a); ok {
		t.Fatal("another text found the entry")
	}
	// Every text is found again, or is a miss: never another text's
	// classification.
	for i := range 3 * classSlots {
		s := "SELECT " + strconv.Itoa(i)
		if i%2 == 1 {
			s = "UPDATE t SET v = " + strconv.Itoa(i)
		}
		cc.put(s, b, sqlclass.ClassifyWith(s, b))
	}
	hits := 0
	for i := range 3 * classSlots {
		s := "SELECT " + strconv.Itoa(i)
		want := sqlclass.Read
		if i%2 == 1 {
			s, want = "UPDATE t SET v = "+strconv.Itoa(i), sqlclass.Write
		}
		if got, ok := lookup(cc, s, b); ok {
			hits++
			if got.Class != want {
				t.Fatalf("%q: class %v, want %v", s, got.Class, want)
			}
		}
	}
	if hits == 0 || hits > classSlots {
		t.Fatalf("%d hits for %d texts in %d slots", hits, 3*classSlots, classSlots)
	}
	// A long text is not kept.
	long := "SELECT 1" + strings.Repeat(" ", maxClassifiedLen)
	cc.put(long, b, sqlclass.ClassifyWith(long, b))
	if _, ok := lookup(cc, long, b); ok {
		t.Fatal("the cache kept a text longer than maxClassifiedLen")
	}
	// Lookups do not allocate.
	q2 := strings.Clone(q)
	cc.put(q2, b, want)
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := lookup(cc, q2, b); !ok {
			t.Fatal("miss")
		}
	}); n != 0 {
		t.Fatalf("a lookup allocates %v times", n)
	}
}

// lookup is classCache.get returning the classification.
func lookup(cc *classCache, query string, fns *sqlclass.Functions) (sqlclass.Result, bool) {
	var r sqlclass.Result
	ok := cc.get(query, fns, &r)
	return r, ok
}
