package lagmeter

import (
	"errors"
	"fmt"
	"strings"
)

// Watermark is the WAL position a replica must have replayed to show a
// session's writes. It names the WAL history it belongs to: after a
// promotion positions go on growing on a new timeline, so a bare LSN could
// be "reached" by a history that does not hold the write.
//
// The zero Watermark requires nothing (no write yet). Any other must be
// complete: SystemID, Timeline and LSN all non-zero. A position the
// driver could not read is not a Watermark at all: it must keep that
// "unknown" state itself and send reads to the primary.
//
// LSN must be at or after the end of the write's commit record. Read
// after the commit on the primary, pg_current_wal_insert_lsn() always is
// (pg_current_wal_lsn() is not with synchronous_commit off); pass it
// through the cluster's [WALLayout.RecordEnd] so that on a page boundary a
// caught-up replica of an idle primary is not left a page header short.
type Watermark struct {
	// SystemID is the cluster's system identifier.
	SystemID uint64

	// Timeline is the primary's timeline when LSN was read.
	Timeline uint32

	// LSN is the position on that timeline.
	LSN LSN
}

// IsZero reports whether w requires nothing.
func (w Watermark) IsZero() bool { return w == Watermark{} }

func (w Watermark) complete() bool { return w.SystemID != 0 && w.Timeline != 0 && w.LSN != 0 }

// Validate reports whether w is zero or complete.
func (w Watermark) Validate() error {
	if w.IsZero() || w.complete() {
		return nil
	}
	return fmt.Errorf("%w: %s is incomplete: system identifier, timeline and LSN must be all set or all zero", ErrMalformedWatermark, w)
}

// ReachedBy reports whether a replica at p is known to show everything up
// to w, and if not, why. p is the replica's position; for the primary
// itself pass its insert position (converted with [WALLayout.RecordEnd]) as
// Replay.
//
// The rules, in order:
//   - the zero w is reached by anything;
//   - an incomplete w, or a p without system identifier, timeline or
//     replay position: not reached, [ReasonPositionUnknown];
//   - another system identifier: not reached, [ReasonForeign];
//   - the same timeline: reached when p.Replay >= w.LSN, else
//     [ReasonBehind];
//   - p on an older timeline than w: not reached, [ReasonBehind] (w was
//     written on a timeline p has not followed yet);
//   - p on a newer timeline: p's history left w.Timeline at some switch
//     point, and holds w only if w.LSN is at or before it. switchPoint is
//     that point: the switch point recorded for w.Timeline in the timeline
//     history file of p.Timeline (000000NN.history, as TIMELINE_HISTORY
//     returns it), or 0 when the caller does not know it, or w.Timeline is
//     not in that history. With 0: not reached, [ReasonPositionUnknown].
//     With w.LSN past it: not reached, [ReasonDiverged]: that write is not
//     in p's history and may have been lost with the old primary; waiting
//     is pointless. Otherwise reached when p.Replay >= w.LSN, else
//     [ReasonBehind].
//
// Timeline numbers are trusted to name one history per system: two
// standbys promoted concurrently can both pick the same next timeline,
// which the topology treats as a conflict (no primary).
//
// ReachedBy does not allocate.
func (w Watermark) ReachedBy(p Position, switchPoint LSN) (bool, Reason) {
	switch {
	case w.IsZero():
		return true, ReasonNone
	case !w.complete(), p.SystemID == 0, p.Timeline == 0, p.Replay == 0:
		return false, ReasonPositionUnknown
	case p.SystemID != w.SystemID:
		return false, ReasonForeign
	case p.Timeline < w.Timeline:
		return false, ReasonBehind
	case p.Timeline > w.Timeline && switchPoint == 0:
		return false, ReasonPositionUnknown
	case p.Timeline > w.Timeline && w.LSN > switchPoint:
		return false, ReasonDiverged
	case p.Replay < w.LSN:
		return false, ReasonBehind
	}
	return true, ReasonNone
}

// ErrMalformedWatermark is wrapped by every error of
// [Watermark.UnmarshalText] and [Watermark.Validate].
var ErrMalformedWatermark = errors.New("lagmeter: malformed watermark")

// watermarkVersion is the text form's version prefix.
const watermarkVersion = "v1"

// maxWatermarkText is longer than any valid text form
// ("v1:FFFFFFFFFFFFFFFF:FFFFFFFF:FFFFFFFF/FFFFFFFF" is 46 bytes).
const maxWatermarkText = 64

// String returns the text form of [Watermark.MarshalText], whether or not
// w is valid.
func (w Watermark) String() string { return string(w.appendText(nil)) }

// AppendText implements encoding.TextAppender; see [Watermark.MarshalText].
func (w Watermark) AppendText(b []byte) ([]byte, error) {
	if err := w.Validate(); err != nil {
		return b, err
	}
	return w.appendText(b), nil
}

// MarshalText implements encoding.TextMarshaler. The text form is
//
//	v1:<system identifier>:<timeline>:<LSN>
//
// with the system identifier and timeline in upper-case hexadecimal without
// leading zeros, and the LSN as PostgreSQL prints it ("16/B374D848"), for
// example "v1:6F3A1C2B9D8E7F60:3:16/B374D848". The zero Watermark is
// "v1:0:0:0/0". Each Watermark has exactly one text form. An incomplete
// Watermark is an error.
func (w Watermark) MarshalText() ([]byte, error) { return w.AppendText(nil) }

func (w Watermark) appendText(b []byte) []byte {
	b = append(b, watermarkVersion...)
	b = append(b, ':')
	b = appendHex(b, w.SystemID)
	b = append(b, ':')
	b = appendHex(b, uint64(w.Timeline))
	b = append(b, ':')
	b = appendHex(b, uint64(w.LSN)>>32)
	b = append(b, '/')
	return appendHex(b, uint64(w.LSN)&0xFFFFFFFF)
}

func appendHex(b []byte, v uint64) []byte {
	const digits = "0123456789ABCDEF"
	var buf [16]byte
	i := len(buf)
	for {
		i--
		buf[i] = digits[v&0xF]
		v >>= 4
		if v == 0 {
			break
		}
	}
	return append(b, buf[i:]...)
}

// UnmarshalText implements encoding.TextUnmarshaler. It accepts exactly the
// text form [Watermark.MarshalText] produces (so a token has one spelling)
// and rejects anything else with an error wrapping
// [ErrMalformedWatermark] that says what is wrong; w is then unchanged.
// It does not check the system identifier against a cluster: the caller
// compares w.SystemID with its own and rejects a token of another cluster.
func (w *Watermark) UnmarshalText(text []byte) error {
	v, err := parseWatermark(text)
	if err != nil {
		return err
	}
	*w = v
	return nil
}

func parseWatermark(text []byte) (Watermark, error) {
	if len(text) > maxWatermarkText {
		return Watermark{}, fmt.Errorf("%w: %d bytes, longer than any watermark", ErrMalformedWatermark, len(text))
	}
	s := string(text)
	bad := func(format string, args ...any) (Watermark, error) {
		return Watermark{}, fmt.Errorf("%w %q: "+format, append([]any{ErrMalformedWatermark, s}, args...)...)
	}
	version, rest, _ := strings.Cut(s, ":")
	if version != watermarkVersion {
		if len(version) > 1 && version[0] == 'v' && isDigits(version[1:]) {
			return bad("unsupported version %s (this build reads %s)", version, watermarkVersion)
		}
		return bad("want %s:<system identifier>:<timeline>:<LSN>", watermarkVersion)
	}
	fields := strings.Split(rest, ":")
	if len(fields) != 3 {
		return bad("want %s:<system identifier>:<timeline>:<LSN>, found %d fields after the version", watermarkVersion, len(fields))
	}
	sys, ok := parseHex(fields[0], 16)
	if !ok {
		return bad("system identifier %q is not 1 to 16 upper-case hexadecimal digits without leading zeros", fields[0])
	}
	tli, ok := parseHex(fields[1], 8)
	if !ok {
		return bad("timeline %q is not 1 to 8 upper-case hexadecimal digits without leading zeros", fields[1])
	}
	hi, lo, found := strings.Cut(fields[2], "/")
	h, okh := parseHex(hi, 8)
	l, okl := parseHex(lo, 8)
	if !found || !okh || !okl {
		return bad("LSN %q is not two upper-case hexadecimal numbers of 1 to 8 digits without leading zeros, as in 16/B374D848", fields[2])
	}
	w := Watermark{SystemID: sys, Timeline: uint32(tli), LSN: LSN(h<<32 | l)}
	if !w.IsZero() && !w.complete() {
		return bad("incomplete: system identifier, timeline and LSN must be all set or all zero")
	}
	return w, nil
}

// parseHex parses the canonical upper-case hexadecimal form of appendHex.
func parseHex(s string, maxDigits int) (uint64, bool) {
	if s == "" || len(s) > maxDigits || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | uint64(c-'0')
		case 'A' <= c && c <= 'F':
			v = v<<4 | uint64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
