package consistency

import "time"

// base is a reading of the clock taken at start, with its monotonic part:
// see Now.
var base = time.Now()

// Now is time.Now for comparisons with other times read in this process
// (probe times, write times): its monotonic reading is exact, and it costs
// one clock read where time.Now costs two (wall and monotonic), a tenth of
// a read's routing decision on some virtual machines. Its wall reading
// drifts from the real one by what the wall clock was set by since start:
// never print it.
func Now() time.Time { return base.Add(time.Since(base)) }

// nanos is t as nanoseconds since base, for atomic storage.
func nanos(t time.Time) int64 { return int64(t.Sub(base)) }

// since is how long before now the time of nanos ns was.
func since(ns int64, now time.Time) time.Duration { return time.Duration(nanos(now) - ns) }
