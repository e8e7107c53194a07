package consistency

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// This file is a Session's token: the text that carries a Mark's state to
// another process, and its signed form.
//
// The token is the watermark's text ("v1:<system id>:<timeline>:<LSN>",
// lagmeter.Watermark.MarshalText), followed by ";unknown" when the last
// write's position could not be read; "" for a state without writes.
//
// The signed form is
//
//	s1.<issued>.<token>.<mac>
//
// issued is when it was signed, in seconds since the Unix epoch (decimal);
// mac is HMAC-SHA256, keyed with the signing key, of everything before
// the last ".", in unpadded base64url (43 characters). The token itself
// holds no ".", so the fields split without ambiguity. A state without
// writes is "" signed or not: it claims nothing.

// MaxTokenLen is the longest token text, signed or not, that is read at
// all: a longer one is refused before any decoding or HMAC, so that a huge
// token costs its receiver no more than a legitimate one (a 1 MiB token
// cost 2.2 ms of HMAC per request before this cap).
//
// A token carries one position, the Session's last (its writes by relation
// stay in the process: a restored token counts for every relation), so
// the longest one this version writes is bounded by its format:
//
//	v1:<system id>:<timeline>:<LSN>;unknown   3+16+1+8+1+17+8 =  54 bytes
//	s1.<issued>.<token>.<mac>                 3+19+1+54+1+43  = 121 bytes
//
// (a system identifier of 16 hexadecimal digits, a timeline of 8, an LSN
// of 8/8; an issue time of at most 19 decimal digits, as Verify reads it;
// a MAC of 43 base64url characters), 123 bytes in a cookie, which spells
// ";" "%3B". 256 is twice that, for a later version's longer fields, and
// still one to five SHA-256 blocks: the cost of a token stays constant.
const MaxTokenLen = 256

// tooLong is the error of a token longer than MaxTokenLen; its length,
// not its text, is quoted.
func tooLong(n int) error {
	return fmt.Errorf("%d bytes, longer than any token (at most %d)", n, MaxTokenLen)
}

// unknownSuffix marks a token whose last write's position could not be
// read: the receiving process sends reads to the primary until its own
// primary probe, sent after it received the token, supplies a safe position.
const unknownSuffix = ";unknown"

// AppendToken appends s's token to b.
func AppendToken(b []byte, s *State) ([]byte, error) {
	if s.Empty() {
		return b, nil
	}
	if !s.wm.IsZero() {
		var err error
		if b, err = s.wm.AppendText(b); err != nil {
			return nil, err
		}
	}
	if s.unknown {
		b = append(b, unknownSuffix...)
	}
	return b, nil
}

// ParseToken reads a token: its position (zero: none) and whether the last
// write's position is unknown. A malformed token is an error that says
// what is wrong.
func ParseToken(text []byte) (wm lagmeter.Watermark, unknown bool, err error) {
	if len(text) > MaxTokenLen {
		return lagmeter.Watermark{}, false, tooLong(len(text))
	}
	t, unknown := bytes.CutSuffix(text, []byte(unknownSuffix))
	if len(t) > 0 {
		if err := wm.UnmarshalText(t); err != nil {
			return lagmeter.Watermark{}, false, err
		}
	}
	return wm, unknown, nil
}

// MinKeyLen is the shortest signing key: HMAC-SHA256's output size.
const MinKeyLen = 32

// ErrSignature: a token is not signed (when a signature is required), or
// its signature does not verify with any of the keys, or it expired.
var ErrSignature = errors.New("pgrouted: session token not signed by a known key, or expired")

// signedPrefix starts the signed form: its version.
const signedPrefix = "s1."

// macEncoding is the signature's: unpadded base64url, strict (one
// spelling per signature: a changed character never decodes to it).
var macEncoding = base64.RawURLEncoding.Strict()

// macLen is the length of the signature's text.
var macLen = macEncoding.EncodedLen(sha256.Size)

// maxSkew is how far in the future a token's issue time may be: the
// clocks of the processes that sign and verify may differ by that much.
const maxSkew = time.Minute

// CheckKey reports whether key may sign tokens: at least MinKeyLen bytes.
func CheckKey(key []byte) error {
	if len(key) < MinKeyLen {
		return fmt.Errorf("pgrouted: a session token's signing key must be at least %d bytes, this one is %d", MinKeyLen, len(key))
	}
	return nil
}

// Sign returns token signed with key at issued (see the signed form
// above); "" stays "". token must be a token (AppendToken's).
func Sign(token, key []byte, issued time.Time) ([]byte, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if len(token) == 0 {
		return []byte{}, nil
	}
	if bytes.IndexByte(token, '.') >= 0 {
		return nil, fmt.Errorf("pgrouted: session token %q holds a '.'", token)
	}
	b := make([]byte, 0, len(signedPrefix)+20+len(token)+2+macLen)
	b = append(b, signedPrefix...)
	b = strconv.AppendInt(b, issued.Unix(), 10)
	b = append(b, '.')
	b = append(b, token...)
	mac := hmac.New(sha256.New, key)
	mac.Write(b)
	b = append(b, '.')
	return macEncoding.AppendEncode(b, mac.Sum(nil)), nil
}

// Verify returns the token text signed (Sign's) with one of keys, when it
// was issued at most maxAge before now (maxAge <= 0: at any time) and at
// most a minute after now. "" is "" (no token). Anything else, an unsigned
// token included, is an error wrapping ErrSignature; a key shorter than
// MinKeyLen is an error of its own. The signature is compared in constant
// time. A token longer than MaxTokenLen is refused (ErrSignature) before
// any decoding or HMAC.
func Verify(text []byte, keys [][]byte, maxAge time.Duration, now time.Time) ([]byte, error) {
	if len(keys) == 0 {
		return nil, errors.New("pgrouted: no key to verify session tokens with")
	}
	for _, k := range keys {
		if err := CheckKey(k); err != nil {
			return nil, err
		}
	}
	if len(text) == 0 {
		return []byte{}, nil
	}
	if len(text) > MaxTokenLen {
		return nil, fmt.Errorf("%w: %w", ErrSignature, tooLong(len(text)))
	}
	rest, ok := bytes.CutPrefix(text, []byte(signedPrefix))
	if !ok {
		return nil, fmt.Errorf("%w: not signed", ErrSignature)
	}
	dot := bytes.LastIndexByte(rest, '.')
	if dot < 0 || len(rest)-dot-1 != macLen {
		return nil, fmt.Errorf("%w: malformed", ErrSignature)
	}
	signed, sig := text[:len(signedPrefix)+dot], rest[dot+1:]
	want := make([]byte, sha256.Size)
	if n, err := macEncoding.Decode(want, sig); err != nil || n != sha256.Size {
		return nil, fmt.Errorf("%w: malformed signature", ErrSignature)
	}
	verified := false
	for _, k := range keys {
		mac := hmac.New(sha256.New, k)
		mac.Write(signed)
		if hmac.Equal(mac.Sum(nil), want) {
			verified = true
			break
		}
	}
	if !verified {
		return nil, fmt.Errorf("%w: the signature does not verify", ErrSignature)
	}
	issuedText, token, ok := bytes.Cut(rest[:dot], []byte("."))
	if !ok || len(issuedText) == 0 || len(issuedText) > 19 || issuedText[0] < '0' || issuedText[0] > '9' {
		return nil, fmt.Errorf("%w: malformed issue time", ErrSignature)
	}
	secs, err := strconv.ParseInt(string(issuedText), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed issue time", ErrSignature)
	}
	issued := time.Unix(secs, 0)
	if issued.After(now.Add(maxSkew)) {
		return nil, fmt.Errorf("%w: issued in the future (%s)", ErrSignature, issued.UTC().Format(time.RFC3339))
	}
	// The issue time has a second's resolution: a token is as young as the
	// end of its second.
	if age := now.Sub(issued.Add(time.Second)); maxAge > 0 && age > maxAge {
		return nil, fmt.Errorf("%w: expired (issued %s ago, longer than %s)", ErrSignature, age.Round(time.Second), maxAge)
	}
	if len(token) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrSignature)
	}
	return token, nil
}
