package lagmeter

import "fmt"

// WALLayout is the page geometry of a cluster's write-ahead log. It is
// fixed when the cluster is built and initialised, and every member of a
// streaming cluster shares it; pg_control_init() returns all three values
// (wal_block_size, bytes_per_wal_segment, max_data_alignment), and SHOW
// wal_block_size and SHOW wal_segment_size return the first two.
//
// The zero WALLayout means "unknown": [WALLayout.RecordEnd] then leaves
// positions unchanged, which is always safe but lets a caught-up replica of
// an idle primary look a page header short of it (see RecordEnd).
type WALLayout struct {
	// BlockSize is the WAL page size in bytes (XLOG_BLCKSZ, 8192 unless
	// PostgreSQL was built otherwise): a power of two from 1 kB to 64 kB.
	BlockSize uint32

	// SegmentSize is the WAL segment size in bytes (initdb --wal-segsize,
	// 16 MB by default): a power of two from 1 MB to 1 GB.
	SegmentSize uint32

	// MaxAlign is the server's MAXIMUM_ALIGNOF (8 on 64-bit platforms, 4
	// on some 32-bit ones). Page header sizes depend on it.
	MaxAlign uint32
}

// IsZero reports whether the layout is unknown.
func (l WALLayout) IsZero() bool { return l == WALLayout{} }

// Validate reports whether l is the zero (unknown) layout or a layout
// PostgreSQL can have.
func (l WALLayout) Validate() error {
	if l.IsZero() {
		return nil
	}
	if !pow2In(l.BlockSize, 1<<10, 1<<16) {
		return fmt.Errorf("lagmeter: WAL block size %d must be a power of two from 1024 to 65536", l.BlockSize)
	}
	if !pow2In(l.SegmentSize, 1<<20, 1<<30) {
		return fmt.Errorf("lagmeter: WAL segment size %d must be a power of two from 1 MB to 1 GB", l.SegmentSize)
	}
	if !pow2In(l.MaxAlign, 4, 16) {
		return fmt.Errorf("lagmeter: maximum alignment %d must be 4, 8 or 16", l.MaxAlign)
	}
	return nil
}

func (l WALLayout) valid() bool {
	return pow2In(l.BlockSize, 1<<10, 1<<16) && pow2In(l.SegmentSize, 1<<20, 1<<30) && pow2In(l.MaxAlign, 4, 16)
}

func pow2In(v, lo, hi uint32) bool { return v >= lo && v <= hi && v&(v-1) == 0 }

// Page header sizes before alignment: XLogPageHeaderData is 20 bytes and
// XLogLongPageHeaderData (the first page of a segment) 36.
const (
	shortPageHeader = 20
	longPageHeader  = 36
)

func (l WALLayout) headers() (short, long uint64) {
	a := uint64(l.MaxAlign)
	return (shortPageHeader + a - 1) &^ (a - 1), (longPageHeader + a - 1) &^ (a - 1)
}

// RecordEnd converts a WAL insert position, as pg_current_wal_insert_lsn()
// returns it, into the end of the last record inserted before it: the
// position a standby reports (pg_last_wal_replay_lsn()) once it has
// replayed everything up to there.
//
// The two differ only on a page boundary. When the last record ends exactly
// at the end of a page, the insert position points past the next page's
// header (24 bytes, or 40 on the first page of a segment, with 8-byte
// alignment), where the next record will go, while the record's end, and
// so a caught-up standby's replay position, is the page boundary itself.
// This happens on every idle primary after pg_switch_wal() and by chance
// elsewhere; without the conversion such a standby would never reach the
// primary's position until the next write.
//
// The conversion is exact for the cluster's true layout: no record can end
// inside a page header, so an insert position just past one means that all
// WAL so far ends at the boundary. With a wrong layout it could move a
// position back over a short record, so l must be the cluster's own; the
// zero (unknown) layout returns insert unchanged, as does 0.
func (l WALLayout) RecordEnd(insert LSN) LSN {
	if l.IsZero() || !l.valid() || insert == 0 {
		return insert
	}
	short, long := l.headers()
	off := uint64(insert) % uint64(l.BlockSize)
	page := uint64(insert) - off
	atSegment := page%uint64(l.SegmentSize) == 0
	switch {
	case page == 0:
		// Segment 0 is never written; keep 0 meaning unknown.
		return insert
	case atSegment && off == long, !atSegment && off == short:
		return LSN(page)
	}
	return insert
}
