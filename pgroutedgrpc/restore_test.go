package pgroutedgrpc_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/pgroutedgrpc"
)

// TestRestoreOversized: a token longer than pgrouted.MaxTokenLen gives a
// fresh Session and is counted, signed or not, as a forged one is.
func TestRestoreOversized(t *testing.T) {
	long := "v1:1A:1:0/3000000" + strings.Repeat(";unknown", pgrouted.MaxTokenLen)
	for _, o := range []*pgroutedgrpc.Options{{}, {Keys: [][]byte{bytes.Repeat([]byte("k"), 32)}}} {
		s := o.Restore(long)
		if b, err := s.MarshalText(); err != nil || len(b) != 0 || o.Rejected() != 1 {
			t.Errorf("keys %d: Restore of a %d-byte token: Session %q, %v, %d rejected; want a fresh Session, one rejected", len(o.Keys), len(long), b, err, o.Rejected())
		}
	}
}
