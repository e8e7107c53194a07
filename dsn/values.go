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
	ruleDuration = "is not a duration: use a number with ms, s or m, e.g. 500ms, 1.5s, 2m"
	ruleLag      = "is not a duration (500ms, 2s, 1m) or a size (4096B, 512KB, 16MB, 1GB)"
	ruleBool     = "must be true or false"
)

var (
	errSyntax = errors.New("syntax")
	errRange  = errors.New("out of range")
	// errNoUnit: a number other than 0 without a unit. A bare number is
	// refused rather than given a unit: connect_timeout=30 means seconds
	// to libpq, and 500 in pgrouted_max_lag would be milliseconds or bytes.
	errNoUnit = errors.New("no unit")
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

// parseDuration parses a pgrouted duration: a number with the unit ms, s or
// m, fractions allowed, surrounding space ignored. A bare number is
// errNoUnit, but for 0, which is 0 in any unit. The result is rounded to
// the nanosecond.
func parseDuration(s string) (time.Duration, error) {
	whole, frac, unit, err := splitNumber(strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	var u uint64
	switch unit {
	case "":
		if !isZero(whole, frac) {
			return 0, errNoUnit
		}
		return 0, nil
	case "ms":
		u = uint64(time.Millisecond)
	case "s":
		u = uint64(time.Second)
	case "m":
		u = uint64(time.Minute)
	default:
		return 0, errSyntax
	}
	n, err := scale(whole, frac, u)
	return time.Duration(n), err
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

// formatDuration writes d in the largest unit of ms, s and m that holds it
// exactly, so that parseDuration(formatDuration(d)) == d for every d >= 0.
func formatDuration(d time.Duration) string {
	if d < 0 {
		if d == math.MinInt64 {
			return "-" + formatDuration(math.MaxInt64)
		}
		return "-" + formatDuration(-d)
	}
	switch {
	case d == 0:
		return "0s"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d%time.Millisecond == 0:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
	ns := strconv.FormatInt(int64(d%time.Millisecond)+int64(time.Millisecond), 10)[1:] // six digits
	return strconv.FormatInt(int64(d/time.Millisecond), 10) + "." + strings.TrimRight(ns, "0") + "ms"
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
