//go:build unix

package pgrouted_test

// The checkers of the histories TestConsistencyUnderFaults records
// (linearizable_test.go): porcupine's model, a register per key; a checker
// of each Session's guarantees; a count of stale reads; and the drawing of
// a history that fails. Their own tests, on histories written by hand,
// show that each finds what it looks for.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// linInput is a porcupine operation's input; a read's output is the value
// it read (int64), a write's nothing.
type linInput struct {
	key   int
	write bool
	value int64
}

// linModel is a register per key, partitioned by key; every key starts
// at 0.
var linModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[int][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(linInput).key
			byKey[k] = append(byKey[k], op)
		}
		keys := make([]int, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Ints(keys)
		var parts [][]porcupine.Operation
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		in := input.(linInput)
		if in.write {
			return true, in.value
		}
		return output.(int64) == state.(int64), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(linInput)
		if in.write {
			return fmt.Sprintf("write(k%d, %d)", in.key, in.value)
		}
		return fmt.Sprintf("read(k%d) → %d", in.key, output.(int64))
	},
	DescribeState: func(state any) string { return strconv.FormatInt(state.(int64), 10) },
}

// porcupineHistory turns the history into porcupine's operations: a write
// whose outcome is unknown stays pending until after every other
// operation (it may take effect at any time after its call, or never).
func porcupineHistory(ops []linOp) []porcupine.Operation {
	var end int64
	for _, op := range ops {
		end = max(end, op.Return)
	}
	h := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		ret := op.Return
		var out any
		meta := ""
		if op.Write {
			if !op.OK {
				ret = end + 1
				meta = "outcome unknown"
			}
		} else {
			out = op.Value
			meta = op.Endpoint
			if op.AsOf != 0 {
				meta += fmt.Sprintf(" (token of session %d)", op.Session)
			}
		}
		h = append(h, porcupine.Operation{
			ClientId: op.Client, Input: linInput{key: op.Key, write: op.Write, value: op.Value},
			Call: op.Call, Output: out, Return: ret, Metadata: meta,
		})
	}
	return h
}

// sessionViolation is a read that broke a Session's guarantee: it read
// got, older than want.
type sessionViolation struct {
	op   linOp
	kind string // "read-your-writes" or "monotonic reads"
	want int64
}

func (v sessionViolation) String() string {
	s := fmt.Sprintf("%s: client %d read k%d → %d, want at least %d (session %d, on %q)",
		v.kind, v.op.Client, v.op.Key, v.op.Value, v.want, v.op.Session, v.op.Endpoint)
	if v.op.AsOf != 0 {
		s += " with a token taken " + time.Duration(v.op.Call-v.op.AsOf).String() + " before the read"
	}
	return s
}

// sessionReport is what checkSessions found.
type sessionReport struct {
	violations []sessionViolation
	// ryw counts the reads of a key by the Session that writes it (its
	// own client's, and with its token in another process); tokenReads
	// those with a token.
	ryw, tokenReads int
	// otherMonotonic counts the reads of a key another Session writes
	// that returned an older value than the same client's read of it
	// before: pgrouted does not promise monotonic reads of other
	// Sessions' writes (a Session holds its own writes' position only).
	otherMonotonic int
}

// checkSessions checks each Session's guarantees on the history: a read
// with a Session returns a value at least as new as the Session's last
// write to that key acknowledged before the read began (or, with a token,
// before the token was taken), and a client's reads of a key its Session
// writes are monotonic. Each key has one writer, which writes 1, 2, 3, ...:
// a larger value is a newer one.
func checkSessions(ops []linOp) sessionReport {
	type sk struct{ session, key int }
	acked := map[sk][]linOp{} // by return
	var reads []linOp
	for _, op := range ops {
		switch {
		case op.Write && op.OK:
			acked[sk{op.Session, op.Key}] = append(acked[sk{op.Session, op.Key}], op)
		case !op.Write:
			reads = append(reads, op)
		}
	}
	for _, ws := range acked {
		slices.SortFunc(ws, func(a, b linOp) int { return compareInt(a.Return, b.Return) })
	}
	slices.SortFunc(reads, func(a, b linOp) int { return compareInt(a.Call, b.Call) })
	var r sessionReport
	type ck struct{ client, key int }
	last := map[ck]int64{}
	for _, op := range reads {
		ws := acked[sk{op.Session, op.Key}]
		writer := len(ws) > 0 || op.Key == ownKey(op.Session)
		if writer {
			r.ryw++
			if op.AsOf != 0 {
				r.tokenReads++
			}
		}
		bound := op.Call
		if op.AsOf != 0 {
			bound = min(bound, op.AsOf)
		}
		// The last write that returned at or before bound.
		i := sort.Search(len(ws), func(i int) bool { return ws[i].Return > bound })
		if i > 0 && op.Value < ws[i-1].Value {
			r.violations = append(r.violations, sessionViolation{op: op, kind: "read-your-writes", want: ws[i-1].Value})
		}
		prev, seen := last[ck{op.Client, op.Key}]
		if seen && op.Value < prev {
			if op.AsOf == 0 && writer {
				r.violations = append(r.violations, sessionViolation{op: op, kind: "monotonic reads", want: prev})
			} else {
				r.otherMonotonic++
			}
		}
		last[ck{op.Client, op.Key}] = max(prev, op.Value)
	}
	return r
}

// ownKey is the key the client id writes, or -1 for a reader.
func ownKey(client int) int {
	proc, c := client/linClients, client%linClients
	if c >= linWriters {
		return -1
	}
	return proc*linWriters + c
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// staleReads counts the reads that returned an older value than a write
// acknowledged before they began, whoever wrote it.
func staleReads(ops []linOp) int {
	acked := map[int][]linOp{}
	for _, op := range ops {
		if op.Write && op.OK {
			acked[op.Key] = append(acked[op.Key], op)
		}
	}
	for _, ws := range acked {
		slices.SortFunc(ws, func(a, b linOp) int { return compareInt(a.Return, b.Return) })
	}
	stale := 0
	for _, op := range ops {
		if op.Write {
			continue
		}
		ws := acked[op.Key]
		i := sort.Search(len(ws), func(i int) bool { return ws[i].Return >= op.Call })
		// Values grow with acknowledgement: the newest acked before op
		// is the largest.
		if i > 0 && op.Value < ws[i-1].Value {
			stale++
		}
	}
	return stale
}

// checkTimeout bounds porcupine's search of a history.
const checkTimeout = 3 * time.Minute

// draw writes the history, the faults and the violations found as a
// porcupine visualization, and returns the file's path: in
// $PGROUTED_HISTORY_DIR, else in a new directory under the temporary
// directory (kept, so that the path can be opened after the test).
func draw(t *testing.T, name string, info porcupine.LinearizationInfo, run linRun, bad []sessionViolation) string {
	t.Helper()
	dir := os.Getenv("PGROUTED_HISTORY_DIR")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "pgrouted-history-"); err != nil {
			t.Errorf("draw the history: %v", err)
			return ""
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("draw the history: %v", err)
		return ""
	}
	var notes []porcupine.Annotation
	for _, e := range run.events {
		notes = append(notes, porcupine.Annotation{Tag: "faults", Start: e.start, End: e.end, Description: e.what})
	}
	for _, v := range bad {
		notes = append(notes, porcupine.Annotation{
			ClientId: v.op.Client, Start: v.op.Call, End: v.op.Return, Description: v.kind,
			Details: v.String(), BackgroundColor: "#f8b4b4",
		})
	}
	info.AddAnnotations(notes)
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.html", name, time.Now().UnixNano()))
	if err := porcupine.VisualizePath(linModel, info, path); err != nil {
		t.Errorf("draw the history: %v", err)
		return ""
	}
	return path
}

// TestHistoryCheckers runs the checkers on histories written by hand: each
// finds what it looks for, and nothing else. Client 0 writes key 0 (its
// Session is 0), client 1 key 1, client 2 only reads; client 10 reads in
// another process with the tokens it is handed.
func TestHistoryCheckers(t *testing.T) {
	w := func(client, key int, v, call, ret int64) linOp {
		return linOp{Client: client, Session: client, Key: key, Write: true, Value: v, Call: call, Return: ret, OK: true}
	}
	r := func(client, session, key int, v, call, ret int64) linOp {
		return linOp{Client: client, Session: session, Key: key, Value: v, Call: call, Return: ret}
	}
	unknown := func(op linOp) linOp { op.OK = false; return op }
	token := func(op linOp, asOf int64) linOp { op.AsOf = asOf; return op }

	for _, c := range []struct {
		name         string
		ops          []linOp
		linearizable bool
		stale        int
		violations   []string // kinds
		other        int      // otherMonotonic
	}{
		{"read after write", []linOp{w(0, 0, 1, 0, 10), r(2, 2, 0, 1, 20, 30)}, true, 0, nil, 0},
		{"read concurrent with a write sees either", []linOp{
			w(0, 0, 1, 0, 10), w(0, 0, 2, 20, 40), r(2, 2, 0, 1, 25, 30), r(1, 1, 0, 2, 26, 35),
		}, true, 0, nil, 0},
		{"stale read of another client's write", []linOp{
			w(0, 0, 1, 0, 10), w(0, 0, 2, 11, 20), r(2, 2, 0, 1, 30, 40),
		}, false, 1, nil, 0},
		{"a read going back in time", []linOp{
			w(0, 0, 1, 0, 10), w(0, 0, 2, 20, 100), r(2, 2, 0, 2, 30, 40), r(2, 2, 0, 1, 50, 60),
		}, false, 0, nil, 1},
		{"a write of unknown outcome seen late, or never", []linOp{
			w(0, 0, 1, 0, 10), unknown(w(0, 0, 2, 20, 30)), r(2, 2, 0, 1, 40, 50), r(1, 1, 0, 2, 60, 70), w(0, 0, 3, 80, 90),
			w(1, 1, 1, 0, 10), unknown(w(1, 1, 2, 20, 30)), r(2, 2, 1, 1, 40, 50),
		}, true, 0, nil, 0},
		{"a Session misses its own write", []linOp{
			w(0, 0, 1, 0, 10), w(0, 0, 2, 20, 30), r(0, 0, 0, 1, 40, 50),
		}, false, 1, []string{"read-your-writes"}, 0},
		{"a Session's reads of its key go back", []linOp{
			w(0, 0, 1, 0, 10), unknown(w(0, 0, 2, 20, 30)), r(0, 0, 0, 2, 40, 50), r(0, 0, 0, 1, 60, 70),
		}, false, 0, []string{"monotonic reads"}, 0},
		{"a token read misses a write before the token", []linOp{
			w(0, 0, 1, 0, 10), w(0, 0, 2, 20, 30), token(r(10, 0, 0, 1, 40, 50), 35),
		}, false, 1, []string{"read-your-writes"}, 0},
		{"a token read need not see a write after the token", []linOp{
			w(0, 0, 1, 0, 10), token(r(10, 0, 0, 1, 40, 50), 15), w(0, 0, 2, 20, 30),
		}, false, 1, nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ok := porcupine.CheckOperations(linModel, porcupineHistory(c.ops))
			if ok != c.linearizable {
				t.Errorf("porcupine: linearizable %v, want %v", ok, c.linearizable)
			}
			if n := staleReads(c.ops); n != c.stale {
				t.Errorf("staleReads: %d, want %d", n, c.stale)
			}
			rep := checkSessions(c.ops)
			var kinds []string
			for _, v := range rep.violations {
				kinds = append(kinds, v.kind)
			}
			if !slices.Equal(kinds, c.violations) {
				t.Errorf("checkSessions: %v, want %v", rep.violations, c.violations)
			}
			if rep.otherMonotonic != c.other {
				t.Errorf("checkSessions: %d reads of others' keys going back, want %d", rep.otherMonotonic, c.other)
			}
		})
	}
}

// stepBack is a read that returned an older value of a key than a read of
// it by the same client that returned before it was called (monotonic
// reads; causal consistency's): it read got, the client had seen want.
type stepBack struct {
	op   linOp
	want int64
}

func (s stepBack) String() string {
	return fmt.Sprintf("client %d read k%d → %d on %q (reason %q), after it had seen %d", s.op.Client, s.op.Key, s.op.Value, s.op.Endpoint, s.op.Reason, s.want)
}

// stepsBack returns the reads of the history that went back (stepBack):
// for each client and key, a read returning a smaller value than the
// largest one a read of that client returned before the read's call. Each
// key's values only grow (a counter): a smaller value is an older one.
// Reads with a token in another process are a client's too (the client
// is the user, whichever process served it).
func stepsBack(ops []linOp) []stepBack {
	type ck struct{ client, key int }
	byClient := map[ck][]linOp{}
	for _, op := range ops {
		if !op.Write {
			k := ck{op.Client, op.Key}
			byClient[k] = append(byClient[k], op)
		}
	}
	var back []stepBack
	for _, reads := range byClient {
		byReturn := slices.Clone(reads)
		slices.SortFunc(byReturn, func(a, b linOp) int { return compareInt(a.Return, b.Return) })
		slices.SortFunc(reads, func(a, b linOp) int { return compareInt(a.Call, b.Call) })
		seen, i := int64(-1), 0
		for _, r := range reads {
			for ; i < len(byReturn) && byReturn[i].Return < r.Call; i++ {
				seen = max(seen, byReturn[i].Value)
			}
			if r.Value < seen {
				back = append(back, stepBack{op: r, want: seen})
			}
		}
	}
	return back
}

// TestStepsBackChecker runs stepsBack on histories written by hand: it
// finds a client's read going back, and nothing else (another client's
// older value, a read concurrent with a newer one).
func TestStepsBackChecker(t *testing.T) {
	r := func(client int, v, call, ret int64) linOp {
		return linOp{Client: client, Session: client, Key: 1, Value: v, Call: call, Return: ret}
	}
	for _, c := range []struct {
		name string
		ops  []linOp
		want int
	}{
		{"growing", []linOp{r(0, 1, 0, 10), r(0, 1, 20, 30), r(0, 5, 40, 50)}, 0},
		{"back", []linOp{r(0, 5, 0, 10), r(0, 3, 20, 30), r(0, 6, 40, 50), r(0, 4, 60, 70)}, 2},
		{"another client's older value", []linOp{r(0, 5, 0, 10), r(1, 3, 20, 30)}, 0},
		{"concurrent reads of one client", []linOp{r(0, 5, 0, 30), r(0, 3, 20, 40)}, 0},
		{"a write is no read", []linOp{{Client: 0, Key: 1, Write: true, Value: 9, Call: 0, Return: 10, OK: true}, r(0, 3, 20, 30)}, 0},
	} {
		if got := len(stepsBack(c.ops)); got != c.want {
			t.Errorf("%s: %d steps back, want %d", c.name, got, c.want)
		}
	}
}
