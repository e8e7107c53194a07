package pgrouted

import (
	"sync"
	"sync/atomic"
)

// This file is the memory of the statements a replica refused with SQLSTATE
// 25006 (read_only_sql_transaction): they wrote, through something their
// text and the catalog did not show, so the same text goes to the primary
// first from then on (plan: ReasonRefused).

// maxRefused bounds the statements remembered as refused by a replica.
const maxRefused = 256

// refusedSet remembers the texts of statements that looked like reads and
// that a replica refused with SQLSTATE 25006 (they wrote, through a
// function the catalog did not know as VOLATILE, say): the next run of the
// same text goes to the primary first, and pins. Lookups read one pointer
// to an immutable map; adding copies it (rare, and bounded).
type refusedSet struct {
	m     atomic.Pointer[map[string]struct{}]
	mu    sync.Mutex // serialises add
	order []string   // oldest first, for eviction
}

// has reports whether q was refused before. It does not allocate.
func (s *refusedSet) has(q string) bool {
	m := s.m.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[q]
	return ok
}

// add remembers q, forgetting the oldest text beyond maxRefused.
func (s *refusedSet) add(q string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.has(q) {
		return
	}
	s.order = append(s.order, q)
	if len(s.order) > maxRefused {
		s.order = s.order[len(s.order)-maxRefused:]
	}
	m := make(map[string]struct{}, len(s.order))
	for _, o := range s.order {
		m[o] = struct{}{}
	}
	s.m.Store(&m)
}
