package pgpipe

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A description lookup is on every pipelined statement's path: it takes
// no lock and allocates nothing.
func TestDescCacheGetDoesNotAllocate(t *testing.T) {
	var d Descs
	q := fmt.Sprintf("SELECT * FROM t WHERE id = $%d", 1)
	d.Put(q, &pgconn.StatementDescription{SQL: q})
	if n := testing.AllocsPerRun(1000, func() {
		if d.Get(q) == nil {
			t.Fatal("the description is not found")
		}
	}); n != 0 {
		t.Errorf("Descs.Get allocates %v times per call", n)
	}
}
