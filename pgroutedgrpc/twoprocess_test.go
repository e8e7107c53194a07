package pgroutedgrpc_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// TestTwoProcesses: service A (this process) and service B (the test
// binary run again), each on its own pgrouted, behind the interceptors,
// while each replica's replication link is 20ms late and reads may wait
// 100ms on a replica. In one call chain:
//
//   - A writes and calls B, which reads A's row (unary, and in a stream):
//     no read misses it, and replicas serve at least 90% of B's reads;
//   - A calls B, which writes, then A reads B's row: no read misses it;
//   - without the client interceptors (the token is not carried), reads
//     do miss, both ways: the test can tell what the interceptors do (it
//     reads until one does).
//
// Once with unsigned tokens, once with signed ones (Options.Keys); no
// token is rejected.
func TestTwoProcesses(t *testing.T) {
	ctx := testCtx(t)
	createItems(t, ctx)
	lagReplicas(t, 20*time.Millisecond)
	for _, signed := range []bool{false, true} {
		t.Run(fmt.Sprintf("signed=%v", signed), func(t *testing.T) {
			var keys [][]byte
			if signed {
				keys = [][]byte{make([]byte, 32)}
				rand.Read(keys[0])
			}
			addrB := startHelper(t, keys)
			ccA := startApp(t, keys, addrB)
			ccB := dial(t, addrB)
			waitReady(t, ctx, ccA)
			waitReady(t, ctx, ccB)

			before := countsOf(t, ctx, ccB)
			aThenB := chains(t, ctx, ccA, "WriteThenPeerRead", "session", 4, 40)
			afterB := countsOf(t, ctx, ccB)
			bReads := afterB.reads - before.reads
			bOnReplicas := afterB.onReplicas - before.onReplicas
			t.Logf("A writes, B reads: %v; B counted %d reads of items, %d on replicas", aThenB, bReads, bOnReplicas)
			if aThenB.misses != 0 {
				t.Errorf("%d of %d reads in B missed the row A wrote before calling it", aThenB.misses, aThenB.reads)
			}
			if bReads != int64(aThenB.reads) {
				t.Errorf("B counted %d reads of items, the chains made %d", bReads, aThenB.reads)
			}
			if bReads < 160 || float64(bOnReplicas) < 0.9*float64(bReads) {
				t.Errorf("replicas served %d of B's %d reads, want at least 90%% of at least 160", bOnReplicas, bReads)
			}

			stream := chains(t, ctx, ccA, "WriteThenPeerStream", "session", 4, 10)
			t.Logf("A writes two rows, B reads them in a stream: %v", stream)
			if stream.misses != 0 || stream.reads != 80 {
				t.Errorf("stream: %d of %d reads in B missed A's rows (want 80 reads)", stream.misses, stream.reads)
			}

			bThenA := chains(t, ctx, ccA, "PeerWriteThenRead", "session", 4, 25)
			t.Logf("B writes, A reads: %v", bThenA)
			if bThenA.misses != 0 {
				t.Errorf("%d of %d reads in A missed the row B wrote in the call before", bThenA.misses, bThenA.reads)
			}

			// Without them, until a read misses each way (one that
			// reaches a replica within its 20 ms: a slower machine
			// misses less often), 40 calls at a time, 400 at most.
			missing := func(method string) chainCount {
				var total chainCount
				for total.misses == 0 && total.reads < 400 && !t.Failed() {
					c := chains(t, ctx, ccA, method, "plain", 2, 20)
					total.reads, total.misses, total.onReplicas = total.reads+c.reads, total.misses+c.misses, total.onReplicas+c.onReplicas
				}
				return total
			}
			plainAB := missing("WriteThenPeerRead")
			plainBA := missing("PeerWriteThenRead")
			t.Logf("without the client interceptors: A writes, B reads: %v; B writes, A reads: %v", plainAB, plainBA)
			if plainAB.misses == 0 || plainBA.misses == 0 {
				t.Errorf("without the client interceptors no read missed its row (%v; %v): the test cannot tell what they do", plainAB, plainBA)
			}

			if a, b := countsOf(t, ctx, ccA), countsOf(t, ctx, ccB); a.rejected+b.rejected != 0 {
				t.Errorf("tokens rejected: A %d, B %d; want none", a.rejected, b.rejected)
			}
		})
	}
}

// chainCount is what chains saw.
type chainCount struct{ reads, misses, onReplicas int }

func (c chainCount) String() string {
	return fmt.Sprintf("%d reads, %d missed, %d (%.0f%%) on replicas", c.reads, c.misses, c.onReplicas,
		100*float64(c.onReplicas)/float64(max(c.reads, 1)))
}

// chains runs users concurrent callers of A's method with mode, each
// times, and counts the reads of the answers ("found replica", ...,
// joined with ",").
func chains(t *testing.T, ctx context.Context, ccA *grpc.ClientConn, method, mode string, users, each int) chainCount {
	t.Helper()
	var mu sync.Mutex
	var total chainCount
	var wg sync.WaitGroup
	for range users {
		wg.Go(func() {
			var n chainCount
			for range each {
				out, err := call(ctx, ccA, method, mode)
				if err != nil {
					t.Errorf("%s %s: %v", method, mode, err)
					break
				}
				for _, r := range strings.Split(out, ",") {
					found, where, ok := strings.Cut(r, " ")
					if !ok || (found != "found" && found != "missing") || (where != "replica" && where != "primary") {
						t.Errorf("%s %s: answer %q", method, mode, out)
						return
					}
					n.reads++
					if found == "missing" {
						n.misses++
					}
					if where == "replica" {
						n.onReplicas++
					}
				}
			}
			mu.Lock()
			total.reads += n.reads
			total.misses += n.misses
			total.onReplicas += n.onReplicas
			mu.Unlock()
		})
	}
	wg.Wait()
	return total
}
