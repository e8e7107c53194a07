//go:build unix

package pgrouted_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrouted/pgrouted"
)

// starts records Config.OnStart's calls and their ends.
type starts struct {
	mu      sync.Mutex
	started []string
	ended   []pgrouted.RouteEvent
}

func (s *starts) onStart(ctx context.Context, query string) func(pgrouted.RouteEvent) {
	s.mu.Lock()
	s.started = append(s.started, query)
	s.mu.Unlock()
	return func(ev pgrouted.RouteEvent) {
		s.mu.Lock()
		s.ended = append(s.ended, ev)
		s.mu.Unlock()
	}
}

// of returns whether query started, and its ends.
func (s *starts) of(query string) (started bool, ended []pgrouted.RouteEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.started {
		started = started || q == query
	}
	for _, ev := range s.ended {
		if ev.Query == query {
			ended = append(ended, ev)
		}
	}
	return started, ended
}

// TestOnStartEndsAtRowsClose: Config.OnStart is called as a statement
// starts, and the function it returns once, when the statement's rows are
// closed (database/sql and the pgx-native API), at once for an exec and a
// statement that failed, with the statement's RouteEvent.
func TestOnStartEndsAtRowsClose(t *testing.T) {
	ctx := testCtx(t)
	s := &starts{}
	db, _, _ := openDSN(t, cluster.DSN()+"&pgrouted_probe_interval=100ms&pgrouted_names="+names(), func(cfg *pgrouted.Config) {
		cfg.OnStart = s.onStart
	})

	q := "SELECT g FROM generate_series(1, 3) g -- onstart rows"
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if started, ended := s.of(q); !started || len(ended) != 0 {
		t.Fatalf("a query whose rows are open: started %v, ended %d times, want started, not ended", started, len(ended))
	}
	for rows.Next() {
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	_, ended := s.of(q)
	if len(ended) != 1 || ended[0].Err != nil || ended[0].Endpoint == "" || ended[0].Op != pgrouted.OpRead {
		t.Fatalf("a query's rows closed: ended %+v, want once, without error, with its endpoint", ended)
	}

	e := "SELECT 1 -- onstart exec"
	if _, err := db.ExecContext(ctx, e); err != nil {
		t.Fatal(err)
	}
	if _, ended := s.of(e); len(ended) != 1 {
		t.Fatalf("an exec: ended %d times, want once", len(ended))
	}

	f := "SELECT 1/0 -- onstart fails"
	_, err = db.QueryContext(ctx, f)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "22012" {
		t.Fatalf("1/0: %v", err)
	}
	if _, ended := s.of(f); len(ended) != 1 || !errors.As(ended[0].Err, &pe) {
		t.Fatalf("a query that failed: ended %+v, want once, with its error", ended)
	}

	// The pgx-native API's rows.
	ps := &starts{}
	p, _ := openPool(t, func(cfg *pgrouted.Config) { cfg.OnStart = ps.onStart })
	pr, err := p.Query(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if started, ended := ps.of(q); !started || len(ended) != 0 {
		t.Fatalf("the Pool's open rows: started %v, ended %d times", started, len(ended))
	}
	for pr.Next() {
	}
	pr.Close()
	if _, ended := ps.of(q); len(ended) != 1 || ended[0].Err != nil || ended[0].Endpoint == "" {
		t.Fatalf("the Pool's rows closed: ended %+v, want once", ended)
	}

	// A batch ends when its results are closed.
	b := &pgx.Batch{}
	b.Queue("SELECT 1 -- onstart batch")
	b.Queue("SELECT 2 -- onstart batch")
	br := p.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		t.Fatal(err)
	}
	before := len(ps.ends())
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if after := len(ps.ends()); after != before+1 {
		t.Fatalf("a batch's results closed: %d ends before, %d after; want one more", before, after)
	}
}

func (s *starts) ends() []pgrouted.RouteEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pgrouted.RouteEvent(nil), s.ended...)
}
