package lagmeter_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// The topology tracker appends the primary's probes; the routing path asks
// whether a replica is inside the budget. Time is passed in, never read.
func ExampleHistory() {
	start := time.Unix(1_700_000_000, 0) // in the driver: time.Now()
	h := lagmeter.NewHistory(0)
	h.Reset(lagmeter.Origin{
		SystemID: 7250000000000000001,
		Timeline: 1,
		Layout:   lagmeter.WALLayout{BlockSize: 8192, SegmentSize: 16 << 20, MaxAlign: 8},
	})
	for i, lsn := range []string{"0/3000100", "0/3001F00", "0/3002018", "0/3002018"} {
		l, _ := lagmeter.ParseLSN(lsn)
		h.Append(lagmeter.Sample{Sent: start.Add(time.Duration(i) * time.Second), LSN: l})
	}

	budget := lagmeter.Budget{MaxTime: 2 * time.Second}
	now := start.Add(3500 * time.Millisecond)
	for _, replay := range []string{"0/3002000", "0/3001F00", "0/3000000", "0/0"} {
		r, _ := lagmeter.ParseLSN(replay)
		p := lagmeter.Position{SystemID: 7250000000000000001, Timeline: 1, Replay: r}
		bound, known := h.StalenessBound(r, now)
		ok, why := h.Check(p, budget, now)
		line := fmt.Sprintf("replay %-9s bound %-5v known %-5v eligible %v %s", replay, bound, known, ok, why)
		fmt.Println(strings.TrimSpace(line))
	}
	// Output:
	// replay 0/3002000 bound 500ms known true  eligible true
	// replay 0/3001F00 bound 2.5s  known true  eligible false behind
	// replay 0/3000000 bound 0s    known false eligible false behind
	// replay 0/0       bound 0s    known false eligible false position-unknown
}

func ExampleWatermark() {
	w := lagmeter.Watermark{SystemID: 7250000000000000001, Timeline: 2, LSN: 0x16B374D848}
	token, _ := w.MarshalText()
	fmt.Println(string(token))

	var back lagmeter.Watermark
	fmt.Println(back.UnmarshalText(token) == nil && back == w)

	replica := lagmeter.Position{SystemID: w.SystemID, Timeline: 2, Replay: 0x16B374D000}
	fmt.Println(w.ReachedBy(replica, 0))
	replica.Replay = 0x16B374D848
	ok, _ := w.ReachedBy(replica, 0)
	fmt.Println(ok)

	// The replica is on timeline 3, whose history left timeline 2 before
	// the write: it is not in that history.
	replica = lagmeter.Position{SystemID: w.SystemID, Timeline: 3, Replay: 0x17000000000}
	fmt.Println(w.ReachedBy(replica, 0x16B0000000))

	fmt.Println(back.UnmarshalText([]byte("v2:1:1:0/1")))
	// Output:
	// v1:649D2C967D950001:2:16/B374D848
	// true
	// false behind
	// true
	// false diverged
	// lagmeter: malformed watermark "v2:1:1:0/1": unsupported version v2 (this build reads v1)
}
