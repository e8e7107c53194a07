package pgpipe

import (
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

func TestServerMajor(t *testing.T) {
	for v, want := range map[string]int{
		"15.18 (Debian 15.18-0+deb12u1)": 15,
		"19beta1":                        19,
		"19.0":                           19,
		"9.6.24":                         9,
		"":                               0,
		"devel":                          0,
	} {
		if got := serverMajor(v); got != want {
			t.Errorf("serverMajor(%q) = %d, want %d", v, got, want)
		}
	}
}

// TestWaitSQLBounds: the polling wait names the position, its deadline
// and a bounded series; WAIT FOR gets a timeout of at least 1 ms.
func TestWaitSQLBounds(t *testing.T) {
	lsn := lagmeter.LSN(0x16B3748)
	q := waitSQL(lsn, 10*time.Millisecond)
	for _, want := range []string{"'0/16B3748'", "interval '10000 microseconds'", "generate_series(0, 22)", "pg_sleep(CASE WHEN g = 0 THEN 0 ELSE 0.001 END)", behindMark} {
		if !strings.Contains(q, want) {
			t.Errorf("waitSQL lacks %q:\n%s", want, q)
		}
	}
	if q := waitForSQL(lsn, 300*time.Microsecond); q != "WAIT FOR LSN '0/16B3748' WITH (TIMEOUT '1ms')" {
		t.Errorf("waitForSQL = %s", q)
	}
}

// TestAppendLSN: the check's parameter is the position as
// lagmeter.LSN.String writes it, and parses back.
func TestAppendLSN(t *testing.T) {
	for _, lsn := range []lagmeter.LSN{0, 1, 0x16B3748, 0x16_B374D848, 0xFFFFFFFF_FFFFFFFF, 0xA_0000000F} {
		got := appendLSN([]byte("x"), lsn)
		if string(got) != "x"+lsn.String() {
			t.Errorf("appendLSN(%v) = %q, want %q", lsn, got[1:], lsn.String())
		}
		if back, ok := parseLSN(got[1:]); !ok || back != lsn {
			t.Errorf("parseLSN(appendLSN(%v)) = %v, %v", lsn, back, ok)
		}
	}
	var s scratch
	if n := testing.AllocsPerRun(100, func() { s.lsnParam[0] = appendLSN(s.lsnText[:0], 0xFFFFFFFF_FFFFFFFF) }); n != 0 {
		t.Errorf("appendLSN into the scratch allocates %v times, want 0", n)
	}
}
