package lagmeter

import (
	"fmt"
	"strconv"
	"strings"
)

// LSN is a PostgreSQL write-ahead log position (pg_lsn), a byte offset into
// the WAL stream. The zero LSN is PostgreSQL's 0/0, which no real position
// equals.
type LSN uint64

// ParseLSN parses the textual form PostgreSQL uses for pg_lsn, two
// hexadecimal numbers separated by a slash ("16/B374D848").
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok || hi == "" || lo == "" || len(hi) > 8 || len(lo) > 8 {
		return 0, fmt.Errorf("lagmeter: invalid LSN %q: want two hexadecimal numbers of at most 8 digits, as in 16/B374D848", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lagmeter: invalid LSN %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lagmeter: invalid LSN %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

// String formats the LSN as PostgreSQL does ("16/B374D848").
func (l LSN) String() string {
	return fmt.Sprintf("%X/%X", uint64(l)>>32, uint64(l)&0xFFFFFFFF)
}

// Sub returns the number of WAL bytes from o to l, or 0 when o is at or
// after l.
func (l LSN) Sub(o LSN) uint64 {
	if o >= l {
		return 0
	}
	return uint64(l - o)
}

// MarshalText implements encoding.TextMarshaler.
func (l LSN) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (l *LSN) UnmarshalText(b []byte) error {
	v, err := ParseLSN(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}
