package testhelp_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/internal/testhelp"
)

func TestContextEndsWithTheTest(t *testing.T) {
	var ctx context.Context
	t.Run("inner", func(t *testing.T) {
		ctx = testhelp.Context(t, time.Hour)
		if ctx.Err() != nil {
			t.Fatalf("context done while the test runs: %v", ctx.Err())
		}
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) < 59*time.Minute {
			t.Fatalf("deadline %v, %v; want about an hour from now", dl, ok)
		}
	})
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after the test: %v, want context.Canceled", ctx.Err())
	}
}

type restorer struct {
	calls    int
	deadline bool
}

func (r *restorer) Restore(ctx context.Context) error {
	r.calls++
	_, r.deadline = ctx.Deadline()
	return nil
}

func TestRestoreAfterTheTest(t *testing.T) {
	r := &restorer{}
	t.Run("inner", func(t *testing.T) {
		testhelp.Restore(t, r)
		if r.calls != 0 {
			t.Fatal("restored before the test ended")
		}
	})
	if r.calls != 1 || !r.deadline {
		t.Fatalf("Restore called %d times (deadline %v), want once with a deadline", r.calls, r.deadline)
	}
}

func TestWaitForPollsUntilTrue(t *testing.T) {
	n := 0
	testhelp.WaitFor(t, time.Minute, time.Millisecond, "three calls", func() bool {
		n++
		return n == 3
	})
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

// fake is a testing.TB whose Fatalf records the message and ends the
// goroutine, as testing.T's does, and whose cleanups run on demand.
type fake struct {
	testing.TB
	fatal    string
	cleanups []func()
}

func (f *fake) Helper()           {}
func (f *fake) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fake) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with f on a goroutine of its own, then f's cleanups, as a
// test would, and returns the message of the first Fatalf.
func (f *fake) run(fn func(testing.TB)) string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	for _, c := range f.cleanups {
		done := make(chan struct{})
		go func() {
			defer close(done)
			c()
		}()
		<-done
	}
	return f.fatal
}

func TestWaitForFailsWithWhat(t *testing.T) {
	f := &fake{TB: t}
	got := f.run(func(tb testing.TB) {
		testhelp.WaitFor(tb, 10*time.Millisecond, time.Millisecond, "the impossible", func() bool { return false })
	})
	if want := "timed out waiting for the impossible"; got != want {
		t.Fatalf("WaitFor failed with %q, want %q", got, want)
	}
}

type broken struct{}

func (broken) Restore(context.Context) error { return errors.New("no PostgreSQL") }

func TestRestoreFailsTheTest(t *testing.T) {
	f := &fake{TB: t}
	got := f.run(func(tb testing.TB) { testhelp.Restore(tb, broken{}) })
	if want := "restore cluster: no PostgreSQL"; got != want {
		t.Fatalf("Restore failed with %q, want %q", got, want)
	}
}
