package pgrouted

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"go.uber.org/goleak"
)

// TestCatalogLoads: the snapshot is unknown-everything until the first load,
// then follows each load; invalidate loads again at once; a failed load is
// retried; close stops the goroutine.
func TestCatalogLoads(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	calls := make(chan chan []sqlclass.FuncDef)
	fail := errors.New("no server")
	load := func(ctx context.Context) ([]sqlclass.FuncDef, error) {
		reply := make(chan []sqlclass.FuncDef)
		select {
		case calls <- reply:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case defs := <-reply:
			if defs == nil {
				return nil, fail
			}
			return defs, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	k := newCatalog(nil, []sqlclass.FuncName{{Name: "audit"}})
	q := "SELECT tenant()"
	if r := sqlclass.ClassifyWith(q, k.functions()); r.Func != sqlclass.FuncUnknown {
		t.Fatalf("before any load: %v, want unknown", r.Func)
	}
	k.start(func(ctx context.Context, _ *catalogSession) (catalogDefs, error) {
		defs, err := load(ctx)
		return catalogDefs{funcs: defs}, err
	}, nil, time.Minute, 10*time.Millisecond, time.Second)
	answer := func(defs []sqlclass.FuncDef) {
		t.Helper()
		select {
		case reply := <-calls:
			reply <- defs
		case <-time.After(time.Minute):
			t.Fatal("no load within a minute")
		}
	}
	answer(nil) // the first load fails, and is retried
	if k.isLoaded() {
		t.Fatal("loaded after a failed load")
	}
	answer([]sqlclass.FuncDef{{Schema: "public", Name: "tenant"}})
	if !k.waitLoaded(context.Background(), time.Minute) {
		t.Fatal("not loaded after a successful load")
	}
	if r := sqlclass.ClassifyWith(q, k.functions()); r.Class != sqlclass.Read {
		t.Fatalf("after the load: %v %v, want read", r.Class, r.Func)
	}
	if r := sqlclass.ClassifyWith("SELECT audit()", k.functions()); r.Func != sqlclass.FuncWrite {
		t.Fatalf("configured write function: %v, want write-function", r.Func)
	}
	k.invalidate()
	k.invalidate() // a second request while one is pending is the same request
	answer([]sqlclass.FuncDef{{Schema: "public", Name: "tenant", Volatile: true}})
	deadline := time.Now().Add(time.Minute)
	for sqlclass.ClassifyWith(q, k.functions()).Func != sqlclass.FuncVolatile {
		if time.Now().After(deadline) {
			t.Fatal("the reload was not published within a minute")
		}
		time.Sleep(time.Millisecond)
	}
	if n := k.loads.Load(); n != 2 {
		t.Fatalf("%d successful loads, want 2", n)
	}
	k.close()
	k.close() // idempotent
}
