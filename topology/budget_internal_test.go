package topology

import (
	"testing"
	"time"
)

// TestBudget: what a prober allows its next connection or query, step by
// step (see budget).
func TestBudget(t *testing.T) {
	const timeout, limit = 500 * time.Millisecond, 5 * time.Second
	var b budget
	steps := []struct {
		what string
		do   func()
		want time.Duration
	}{
		{"a prober's first step: the limit", func() {}, limit},
		{"a quick answer: the probe's timeout", func() { b.took(3*time.Millisecond, timeout, limit) }, timeout},
		{"ran out: doubled", func() { b.ranOut(timeout, limit) }, time.Second},
		{"ran out again: doubled again", func() { b.ranOut(time.Second, limit) }, 2 * time.Second},
		{"answered in 1.5s: twice that", func() { b.took(1500*time.Millisecond, timeout, limit) }, 3 * time.Second},
		{"ran out: up to the limit only", func() { b.ranOut(3*time.Second, limit) }, limit},
		{"answered in 4s: the limit", func() { b.took(4*time.Second, timeout, limit) }, limit},
		{"quick again: back to the timeout at once", func() { b.took(100*time.Millisecond, timeout, limit) }, timeout},
		{"answered in 300ms: twice that", func() { b.took(300*time.Millisecond, timeout, limit) }, 600 * time.Millisecond},
	}
	for _, s := range steps {
		s.do()
		if got := b.get(timeout, limit); got != s.want {
			t.Fatalf("%s: %v, want %v", s.what, got, s.want)
		}
	}
}
