package circuit_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/pgrouted/pgrouted/circuit"
)

// One breaker per replica. The prober reports every probe and asks how
// long to wait before the next one; the data path asks Allow before
// routing a read and reports connection failures; OnChange logs each change
// once.
func Example() {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	b, err := circuit.New("db2:5432", circuit.Config{
		Failures:   2,                // pgrouted_circuit_failures
		Interval:   time.Second,      // pgrouted_probe_interval
		MaxBackoff: 10 * time.Second, // pgrouted_circuit_max_backoff
		Now:        func() time.Time { return now },
		OnChange: func(c circuit.Change) {
			fmt.Printf("circuit %s: %s (%s, %d failures)\n", c.Name, c.To, c.Source, c.Failures)
		},
	})
	if err != nil {
		panic(err)
	}
	refused := errors.New("connect: connection refused")

	// Two reads fail to connect: the replica leaves the rotation.
	b.ReportFailure()
	b.ReportFailure()
	fmt.Println("allow:", b.Allow())

	// The prober backs off while the replica stays down.
	for range 4 {
		b.ReportProbe(refused)
		fmt.Println("next probe in", b.ProbeBackoff())
	}

	// One good probe brings it back.
	b.ReportProbe(nil)
	fmt.Println("allow:", b.Allow(), "next probe in", b.ProbeBackoff())
	// Output:
	// circuit db2:5432: open (data, 2 failures)
	// allow: false
	// next probe in 2s
	// next probe in 4s
	// next probe in 8s
	// next probe in 10s
	// circuit db2:5432: closed (probe, 6 failures)
	// allow: true next probe in 1s
}
