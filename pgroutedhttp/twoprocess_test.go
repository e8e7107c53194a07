//go:build unix

package pgroutedhttp_test

import (
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/pgroutedhttp"
)

// TestTwoProcesses: two instances of a service, each in its own process
// with its own pgrouted, behind pgroutedhttp.Middleware. Users write
// through one (A, this process) and read their write at once through the
// other (B, the test binary run again as serveHelper), while the standbys
// apply each commit 20ms late and reads may wait 100ms on a replica.
//
//   - With a cookie jar, no read misses its row, and replicas serve at
//     least 80% of the reads.
//   - Without one, B knows nothing of A's writes: reads do miss (the test
//     can tell; it reads until one does).
//   - Forged tokens sent to B first (a position past the primary's, another
//     cluster's, garbage) get normal answers and are counted; the first
//     reads as without a token (on a replica, or on the primary only for a
//     reason a read without one has: the RouteEvent's Reason says), and
//     costs nobody else their replica waits.
func TestTwoProcesses(t *testing.T) {
	ctx := testCtx(t)
	createItems(t, ctx)
	_, baseA := startApp(t)
	baseB := startHelper(t, appDSN())
	waitReady(t, baseA)
	waitReady(t, baseB)

	// A row every replica holds, and a token of this cluster.
	id0, token := post(t, http.DefaultClient, baseA, "")
	if err := cluster.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	f := strings.Split(token, ":")
	if len(f) != 4 || f[0] != "v1" {
		t.Fatalf("token after a write: %q", token)
	}
	sys, err := strconv.ParseUint(f[1], 16, 64)
	if err != nil {
		t.Fatal(err)
	}

	forgedRejected := rejected(t, baseB)
	// A position no server has written: B asks the primary, which has
	// not written it either, and reads as without a token.
	// Such a read routes as one without a token: on a replica, or, while
	// B's probes find no standby healthy or free (a starved process under
	// load), on the primary for that reason, never for the token's
	// position (behind, position-unknown, catching-up). Four must reach a
	// replica; up to four more that went to the primary for a reason of
	// their own are allowed, and counted among the rejected tokens.
	ahead := fmt.Sprintf("v1:%X:%s:FFFFFFFF/FFFFFFF0", sys, f[2])
	aheadReads := 0
	for onReplica := 0; onReplica < 4; {
		res := get(t, http.DefaultClient, baseB, id0, ahead)
		aheadReads++
		switch {
		case !res.Found:
			t.Fatalf("read with a token ahead of the primary: %+v, want found", res)
		case res.Replica:
			onReplica++
		case tokenReason(res.Reason) || aheadReads > 8:
			t.Fatalf("read with a token ahead of the primary: %+v (read %d), want found on a replica: it read as with the token", res, aheadReads)
		default:
			t.Logf("read with a token ahead of the primary on the primary: %s (as without a token)", res.Reason)
		}
	}
	foreign := fmt.Sprintf("v1:%X:1:0/1000000", sys+1)
	for _, tok := range []string{foreign, "garbage", "v1:1:1:0/1;unknown;unknown"} {
		if res := get(t, http.DefaultClient, baseB, id0, tok); !res.Found {
			t.Fatalf("read with token %q: %+v, want found", tok, res)
		}
	}
	if res, err := tryGet(http.DefaultClient, baseB, id0, "", &http.Cookie{Name: pgroutedhttp.DefaultCookieName, Value: "v1:%%%"}); err != nil || !res.Found {
		t.Fatalf("read with a garbage cookie: %+v, %v", res, err)
	}
	if n, want := rejected(t, baseB)-forgedRejected, uint64(aheadReads+4); n != want {
		t.Fatalf("B counted %d rejected tokens, want %d (%d past the primary, one foreign, three malformed)", n, want, aheadReads)
	}

	withJar := crossReads(t, baseA, baseB, true, 4, 60)
	// Without a jar, until a read misses (one that reaches a replica
	// within its 20 ms: a slower machine misses less often), 200 reads
	// at a time, 2000 at most.
	var withoutJar crossCount
	for withoutJar.misses == 0 && withoutJar.reads < 2000 && !t.Failed() {
		c := crossReads(t, baseA, baseB, false, 4, 50)
		withoutJar.reads, withoutJar.misses, withoutJar.onReplica = withoutJar.reads+c.reads, withoutJar.misses+c.misses, withoutJar.onReplica+c.onReplica
	}
	t.Logf("with a cookie jar: %v; without: %v", withJar, withoutJar)
	if withJar.misses != 0 {
		t.Errorf("with a cookie jar, %d of %d reads through B missed the row just written through A", withJar.misses, withJar.reads)
	}
	if withJar.reads < 200 || float64(withJar.onReplica) < 0.8*float64(withJar.reads) {
		t.Errorf("with a cookie jar, replicas served %d of %d reads, want at least 80%% of at least 200", withJar.onReplica, withJar.reads)
	}
	if withoutJar.misses == 0 {
		t.Errorf("without a cookie jar, no read of %d missed its row: the test cannot tell what the cookie does", withoutJar.reads)
	}
}

// tokenReason reports whether a read that went to the primary for reason
// r did so for its caller's position: what a read whose forged token was
// dropped never does.
func tokenReason(r string) bool {
	switch pgrouted.Reason(r) {
	case pgrouted.ReasonBehind, pgrouted.ReasonPositionUnknown, pgrouted.ReasonCatchingUp, pgrouted.ReasonDeferred:
		return true
	}
	return false
}

// crossCount is what crossReads saw.
type crossCount struct{ reads, misses, onReplica int }

func (c crossCount) String() string {
	return fmt.Sprintf("%d reads, %d missed, %d (%.0f%%) on replicas", c.reads, c.misses, c.onReplica,
		100*float64(c.onReplica)/float64(max(c.reads, 1)))
}

// crossReads runs users concurrent users, each with a client of its own
// (with a cookie jar, or none) that each times writes a row through A and
// reads it at once through B.
func crossReads(t *testing.T, baseA, baseB string, jar bool, users, each int) crossCount {
	t.Helper()
	var mu sync.Mutex
	var total crossCount
	var wg sync.WaitGroup
	for range users {
		c := &http.Client{}
		if jar {
			j, err := cookiejar.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			c.Jar = j
		}
		wg.Go(func() {
			var n crossCount
			for range each {
				id, _, err := tryPost(c, baseA, "")
				if err != nil {
					t.Error(err)
					break
				}
				res, err := tryGet(c, baseB, id, "", nil)
				if err != nil {
					t.Error(err)
					break
				}
				n.reads++
				if !res.Found {
					n.misses++
				}
				if res.Replica {
					n.onReplica++
				}
			}
			mu.Lock()
			total.reads += n.reads
			total.misses += n.misses
			total.onReplica += n.onReplica
			mu.Unlock()
		})
	}
	wg.Wait()
	return total
}
