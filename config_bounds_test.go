//go:build unix

package pgrouted_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/dsn"
)

// TestConfigBoundsInCode: a Config changed in code is held by NewConnector
// to the bounds and the name rules a DSN is held to, with the same error.
func TestConfigBoundsInCode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*pgrouted.Config)
		err    string
	}{
		{"probe interval of a microsecond", func(c *pgrouted.Config) { c.ProbeInterval = time.Microsecond },
			"pgrouted_probe_interval (1us) must be at least 10ms"},
		{"circuit backoff of a nanosecond", func(c *pgrouted.Config) { c.CircuitMaxBackoff = 1 },
			"pgrouted_circuit_max_backoff (1ns) must be at least 10ms"},
		{"write timeout of centuries", func(c *pgrouted.Config) { c.WriteTimeout = math.MaxInt64 },
			"must be at most 1h"},
		{"replica wait of centuries", func(c *pgrouted.Config) { c.ReplicaWait = math.MaxInt64 },
			"must be at most 1h"},
		{"lease of centuries", func(c *pgrouted.Config) { c.Lease = math.MaxInt64 },
			"pgrouted_lease (9223372036854775807ns) must be at most 2h"},
		{"two billion connections", func(c *pgrouted.Config) { c.ReplicaMaxConns = math.MaxInt32 },
			"pgrouted_replica_max_conns (2147483647) must be a whole number from 1 to 10000"},
		{"name not UTF-8", func(c *pgrouted.Config) { c.Hosts[0].Name = "a\xff" },
			`byte 2 (\xff) is not UTF-8`},
		{"name with a direction override", func(c *pgrouted.Config) { c.Hosts[1].Name = "x\u202ey" },
			`byte 2 is U+202E, a format character`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := pgrouted.ParseConfig(cluster.DSN())
			if err != nil {
				t.Fatal(err)
			}
			tc.change(cfg)
			conn, err := pgrouted.NewConnector(cfg)
			if err == nil {
				conn.Close()
				t.Fatalf("NewConnector accepted it")
			}
			var pe *dsn.ParseError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %T %q, want a *dsn.ParseError with %q", err, err, tc.err)
			}
		})
	}
}
