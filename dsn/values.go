package dsn

import (
	"errors"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Units of the sizes a pgrouted_max_lag value may carry (1024-based).
const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

// The rules a value breaks, as the tail of a message "key (value) rule".
const (
	ruleDuration = "is not a duration: use numbers with a unit of ns, us, ms, s, m or h, e.g. 500ms, 1.5s, 1m30s"
	ruleLag      = "is not a duration (500ms, 1.5s, 1m30s) or a size (4096B, 512KB, 16MB, 1GB)"
	ruleBool     = "must be true or false"
	ruleNegative = "must not be negative"
)

var (
	errSyntax = errors.New("syntax")
	errRange  = errors.New("out of range")
	// errNoUnit: a number other than 0 without a unit. A bare number is
	// refused rather than given a unit: connect_timeout=30 means seconds
	// to libpq, and 500 in pgrouted_max_lag would be milliseconds or bytes.
	errNoUnit = errors.New("no unit")
	// errNegative: a duration below 0 (-5ms), which time.ParseDuration's
	// syntax can write and no key accepts.
	errNegative = errors.New("negative")
)

// ruleNoUnit is the rule a bare number breaks, with the fix: v with each of
// units ("500ms", or "500ms (a time) or 500KB (WAL bytes)").
func ruleNoUnit(v string, units ...string) string {
	v = strings.TrimSpace(v)
	fix := v + units[0]
	if len(units) > 1 {
		fix += " (a time) or " + v + units[1] + " (WAL bytes)"
	}
	return "has no unit: add one, e.g. " + fix
}

// isZero reports whether whole.frac is 0.
func isZero(whole, frac string) bool {
	return strings.Trim(whole, "0") == "" && strings.Trim(frac, "0") == ""
}

// splitNumber splits s (already trimmed) into the digits before the decimal
// point, the digits after it and the unit that follows, with optional spaces
// between number and unit. It accepts `\d+(\.\d+)?` and nothing else: no
// sign, no exponent.
func splitNumber(s string) (whole, frac, unit string, err error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return "", "", "", errSyntax
	}
	whole = s[:i]
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j == i+1 {
			return "", "", "", errSyntax
		}
		frac = s[i+1 : j]
		i = j
	}
	unit = strings.TrimLeft(s[i:], " \t")
	return whole, frac, unit, nil
}

// scale returns whole.frac × unit rounded to the nearest integer, exactly
// (no floating point), or errRange when that does not fit in an int64.
func scale(whole, frac string, unit uint64) (int64, error) {
	whole = strings.TrimLeft(whole, "0")
	if len(whole) > 19 {
		return 0, errRange
	}
	w := uint64(0)
	if whole != "" {
		var err error
		if w, err = strconv.ParseUint(whole, 10, 64); err != nil {
			return 0, errRange
		}
	}
	hi, lo := bits.Mul64(w, unit)
	if hi != 0 || lo > math.MaxInt64 {
		return 0, errRange
	}
	total := lo
	if len(frac) > 18 {
		frac = frac[:18] // beyond 1e-18 of a unit nothing can change
	}
	if frac != "" {
		f, _ := strconv.ParseUint(frac, 10, 64) // at most 18 digits: fits
		den := uint64(1)
		for range len(frac) {
			den *= 10
		}
		// f < den, so f×unit < den×2⁶⁴ and the quotient fits in 64 bits.
		fh, fl := bits.Mul64(f, unit)
		q, r := bits.Div64(fh, fl, den)
		if r >= den-r { // round half up
			q++
		}
		if total+q < total || total+q > math.MaxInt64 {
			return 0, errRange
		}
		total += q
	}
	return int64(total), nil
}

// durationUnits are the units of a duration: time.ParseDuration's, both
// spellings of the micro sign included.
var durationUnits = map[string]uint64{
	"ns": uint64(time.Nanosecond),
	"us": uint64(time.Microsecond),
	"µs": uint64(time.Microsecond), // U+00B5 MICRO SIGN
	"μs": uint64(time.Microsecond), // U+03BC GREEK SMALL LETTER MU
	"ms": uint64(time.Millisecond),
	"s":  uint64(time.Second),
	"m":  uint64(time.Minute),
	"h":  uint64(time.Hour),
}

// parseDuration parses the value of every duration key: the one parser
// they share. It accepts time.ParseDuration's syntax, an optional sign and
// then one or more numbers, each with a unit of ns, us (or µs), ms, s, m
// and h, fractions allowed (250us, 1.5s, 1m30s, 1h, .5s), and pgrouted's
// own older forms beside it: space between a lone number and its unit
// (2 s), and 0 written with decimals (0.00). Surrounding space is ignored.
// A number without a unit is errNoUnit, but for 0, which is 0 in any unit.
// A value below 0 is errNegative; one beyond an int64 of nanoseconds is
// errRange. The arithmetic is exact: each number is rounded to the nearest
// nanosecond, where time.ParseDuration truncates, so that the two differ by
// less than a nanosecond a number.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	if s == "" {
		return 0, errSyntax
	}
	var total int64
	for parts := 0; s != ""; parts++ {
		whole, frac, rest, err := leadingNumber(s)
		if err != nil {
			return 0, err
		}
		unit := strings.TrimLeft(rest, " \t")
		spaced := len(unit) < len(rest)
		n := 0
		for n < len(unit) && unit[n] != '.' && unit[n] != ' ' && unit[n] != '\t' && (unit[n] < '0' || unit[n] > '9') {
			n++
		}
		unit, s = unit[:n], unit[n:]
		switch {
		case unit == "" && parts == 0 && s == "":
			// A number alone: 0 is 0 in any unit, anything else needs one.
			if !isZero(whole, frac) {
				return 0, errNoUnit
			}
			return 0, nil
		case unit == "":
			return 0, errSyntax // 1m30: a unit missing after the first
		case spaced && (parts > 0 || s != ""):
			return 0, errSyntax // space only in the old form of one number
		}
		u, ok := durationUnits[unit]
		if !ok {
			return 0, errSyntax
		}
		v, err := scale(whole, frac, u)
		if err != nil {
			return 0, err
		}
		if total > math.MaxInt64-v {
			return 0, errRange
		}
		total += v
	}
	if total != 0 && neg {
		return 0, errNegative
	}
	return time.Duration(total), nil
}

// leadingNumber splits s into the digits before a decimal point, those
// after it and what follows, as time.ParseDuration reads a number: digits,
// a point and digits, with digits on at least one side (5, 5., .5, 5.25);
// no sign, no exponent.
func leadingNumber(s string) (whole, frac, rest string, err error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	whole = s[:i]
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		frac, i = s[i+1:j], j
		if whole == "" && frac == "" {
			return "", "", "", errSyntax
		}
	} else if whole == "" {
		return "", "", "", errSyntax
	}
	return whole, frac, s[i:], nil
}

// parseSize parses a size in bytes: a number with the unit B, KB (or kB), MB
// or GB, 1024-based, fractions allowed and rounded to the nearest byte.
func parseSize(s string) (int64, error) {
	whole, frac, unit, err := splitNumber(strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	var u uint64
	switch unit {
	case "B":
		u = 1
	case "KB", "kB":
		u = kib
	case "MB":
		u = mib
	case "GB":
		u = gib
	case "":
		return 0, errNoUnit
	default:
		return 0, errSyntax
	}
	return scale(whole, frac, u)
}

// parseLagBudget parses a pgrouted_max_lag value: "none", a size when it
// ends in B, else a duration.
func parseLagBudget(s string) (LagBudget, error) {
	s = strings.TrimSpace(s)
	if s == "none" {
		return LagNone(), nil
	}
	if strings.HasSuffix(s, "B") {
		n, err := parseSize(s)
		if err != nil {
			return LagBudget{}, err
		}
		return LagBytes(n), nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return LagBudget{}, err
	}
	return LagTime(d), nil
}

// parseBool accepts true/false, on/off, yes/no and 1/0, in any case, as
// PostgreSQL does for its own boolean settings.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "on", "yes", "1":
		return true, nil
	case "false", "off", "no", "0":
		return false, nil
	}
	return false, errSyntax
}

// formatDuration writes d as one number in the largest unit of h, m, s,
// ms, us and ns that holds it exactly (1h, 90s, 250us), so that
// parseDuration(formatDuration(d)) == d for every d >= 0, and so does
// time.ParseDuration.
func formatDuration(d time.Duration) string {
	if d < 0 {
		if d == math.MinInt64 {
			return "-" + formatDuration(math.MaxInt64) // one off: for a message only
		}
		return "-" + formatDuration(-d)
	}
	if d == 0 {
		return "0s"
	}
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}

// formatSize writes n bytes in the largest unit of B, KB, MB and GB that
// holds it exactly.
func formatSize(n int64) string {
	switch {
	case n != 0 && n%gib == 0:
		return strconv.FormatInt(n/gib, 10) + "GB"
	case n != 0 && n%mib == 0:
		return strconv.FormatInt(n/mib, 10) + "MB"
	case n != 0 && n%kib == 0:
		return strconv.FormatInt(n/kib, 10) + "KB"
	}
	return strconv.FormatInt(n, 10) + "B"
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
