package consistency_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/lagmeter"
)

var (
	key1 = bytes.Repeat([]byte{1}, 32)
	key2 = bytes.Repeat([]byte{2}, 32)
)

// tokens are the tokens the table-driven tests and the fuzz seeds share.
var tokens = []string{
	"v1:6F3A1C2B9D8E7F60:3:16/B374D848",
	"v1:6F3A1C2B9D8E7F60:3:16/B374D848;unknown",
	";unknown",
	"v1:1:1:0/1",
}

// sign signs text as Sign does, with any issue time (expired ones, future
// ones): what a test or an attacker with the key could write.
func sign(key []byte, issued int64, text string) string {
	signed := fmt.Sprintf("s1.%d.%s", issued, text)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(signed))
	return signed + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// TestSignVerify: a signed token verifies with its key among others, for
// maxAge; anything else is ErrSignature; short keys are refused.
func TestSignVerify(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, tok := range tokens {
		b, err := consistency.Sign([]byte(tok), key1, now)
		if err != nil {
			t.Fatal(err)
		}
		if want := sign(key1, now.Unix(), tok); string(b) != want {
			t.Fatalf("Sign(%q) = %q, want %q (the documented form)", tok, b, want)
		}
		got, err := consistency.Verify(b, [][]byte{key2, key1}, time.Hour, now.Add(30*time.Minute))
		if err != nil || string(got) != tok {
			t.Fatalf("Verify(%q) = %q, %v; want %q", b, got, err, tok)
		}
	}
	tok := tokens[0]
	for _, tc := range []struct {
		name, text string
	}{
		{"unsigned", tok},
		{"another key", sign(key2, now.Unix(), tok)},
		{"expired", sign(key1, now.Add(-2*time.Hour).Unix(), tok)},
		{"from the future", sign(key1, now.Add(time.Hour).Unix(), tok)},
		{"negative time", sign(key1, -5, tok)},
		{"plus sign", sign(key1, 0, tok)[:3] + "+" + sign(key1, 0, tok)[3:]},
		{"empty token", sign(key1, now.Unix(), "")},
		{"no mac", "s1.1700000000." + tok},
		{"mac cut", sign(key1, now.Unix(), tok)[:len(sign(key1, now.Unix(), tok))-1]},
		{"other version", "s2" + sign(key1, now.Unix(), tok)[2:]},
	} {
		if got, err := consistency.Verify([]byte(tc.text), [][]byte{key1}, time.Hour, now); !errors.Is(err, consistency.ErrSignature) {
			t.Errorf("%s: Verify(%q) = %q, %v; want ErrSignature", tc.name, tc.text, got, err)
		}
	}
	if got, err := consistency.Verify(nil, [][]byte{key1}, time.Hour, now); err != nil || len(got) != 0 {
		t.Errorf("Verify of no token: %q, %v; want no token", got, err)
	}
	// maxAge 0: any age.
	if _, err := consistency.Verify([]byte(sign(key1, 1, tok)), [][]byte{key1}, 0, now); err != nil {
		t.Errorf("maxAge 0, a token of 1970: %v", err)
	}
	short := make([]byte, 31)
	if _, err := consistency.Sign([]byte(tok), short, now); err == nil || errors.Is(err, consistency.ErrSignature) {
		t.Errorf("Sign with a 31-byte key: %v, want a key error", err)
	}
	if _, err := consistency.Verify([]byte(sign(key1, now.Unix(), tok)), [][]byte{key1, short}, 0, now); err == nil || errors.Is(err, consistency.ErrSignature) {
		t.Errorf("Verify with a 31-byte key: %v, want a key error", err)
	}
	if _, err := consistency.Verify([]byte(tok), nil, 0, now); err == nil {
		t.Errorf("Verify without keys: no error")
	}
}

// FuzzToken: any text either fails to parse as a token or parses to a
// state whose token parses back to the same state; nothing panics.
func FuzzToken(f *testing.F) {
	for _, tok := range tokens {
		f.Add([]byte(tok))
	}
	f.Add([]byte("v1:0:0:0/0"))
	f.Add([]byte("v1:1:1:0/1;unknown;unknown"))
	f.Fuzz(func(t *testing.T, text []byte) {
		wm, unknown, err := consistency.ParseToken(text)
		if err != nil {
			return
		}
		var m consistency.Mark
		m.Restore(wm, unknown, consistency.Unsigned, consistency.Now())
		out, err := consistency.AppendToken(nil, m.Load())
		if err != nil {
			t.Fatalf("%q parsed to %v (unknown %v), which does not format: %v", text, wm, unknown, err)
		}
		wm2, unknown2, err := consistency.ParseToken(out)
		if err != nil || wm2 != wm || unknown2 != unknown {
			t.Fatalf("%q -> %q -> %v %v %v; want %v %v", text, out, wm2, unknown2, err, wm, unknown)
		}
	})
}

// FuzzSignedToken: a token signed with a key verifies to itself with that
// key, not with another (unless it is longer than MaxTokenLen: refused
// for its length); the signed form with any byte changed never verifies;
// and Verify never panics on the fuzzer's text.
func FuzzSignedToken(f *testing.F) {
	for _, tok := range tokens {
		f.Add([]byte(tok), int64(1_700_000_000), uint(7), byte(1))
	}
	f.Add([]byte("v1:1:1:0/1"), int64(0), uint(0), byte(0x80))
	f.Fuzz(func(t *testing.T, token []byte, issued int64, at uint, flip byte) {
		// Sign's times are the clock's: after 1970, before the year 36812.
		now := time.Unix(issued&(1<<40-1), 0)
		// Whatever the text, Verify answers without panicking.
		consistency.Verify(token, [][]byte{key1}, time.Hour, now)
		b, err := consistency.Sign(token, key1, now)
		if err != nil || len(token) == 0 {
			return
		}
		got, err := consistency.Verify(b, [][]byte{key1}, time.Hour, now)
		if len(b) > consistency.MaxTokenLen {
			// Longer than any token this version writes: refused for its
			// length, signed or not.
			if err == nil {
				t.Fatalf("Sign(%q) = %q, %d bytes, verifies", token, b, len(b))
			}
			return
		}
		if err != nil || !bytes.Equal(got, token) {
			t.Fatalf("Sign(%q) = %q verifies to %q, %v", token, b, got, err)
		}
		if _, err := consistency.Verify(b, [][]byte{key2}, time.Hour, now); err == nil {
			t.Fatalf("%q verifies with another key", b)
		}
		if flip == 0 {
			flip = 1
		}
		changed := bytes.Clone(b)
		changed[at%uint(len(changed))] ^= flip
		if got, err := consistency.Verify(changed, [][]byte{key1}, 0, now); err == nil {
			t.Fatalf("%q, %q with one byte changed, verifies to %q", b, changed, got)
		}
	})
}

// TestMaxTokenLen: the longest token the format allows (every field at
// its widest: the largest system identifier, timeline and LSN, an unknown
// position, a 19-digit issue time, in a cookie's spelling) fits in half
// of MaxTokenLen: the cap refuses nothing legitimate, with a margin.
func TestMaxTokenLen(t *testing.T) {
	var m consistency.Mark
	m.Restore(lagmeter.Watermark{SystemID: math.MaxUint64, Timeline: math.MaxUint32, LSN: math.MaxUint64}, true, consistency.Unsigned, consistency.Now())
	longest, err := consistency.AppendToken(nil, m.Load())
	if err != nil {
		t.Fatal(err)
	}
	signed := sign(key1, math.MaxInt64, string(longest))
	cookie := strings.ReplaceAll(signed, ";", "%3B")
	t.Logf("longest token %d bytes, signed %d, in a cookie %d; MaxTokenLen %d", len(longest), len(signed), len(cookie), consistency.MaxTokenLen)
	if len(longest) != 54 || len(signed) != 121 {
		t.Errorf("longest token %q (%d bytes), signed %q (%d bytes); the cap's comment says 54 and 121", longest, len(longest), signed, len(signed))
	}
	if 2*len(cookie) > consistency.MaxTokenLen {
		t.Errorf("the longest token in a cookie is %d bytes: more than half of MaxTokenLen (%d)", len(cookie), consistency.MaxTokenLen)
	}
	wm, unknown, err := consistency.ParseToken(longest)
	if err != nil || !unknown || wm.SystemID != math.MaxUint64 {
		t.Errorf("ParseToken(%q) = %v, %v, %v", longest, wm, unknown, err)
	}
}

// TestOversizedToken: a token longer than MaxTokenLen is refused for its
// length, before anything else is looked at: a correctly signed one too
// (so before the HMAC decides), and one whose signature is wrong is
// refused for its length, not its signature.
func TestOversizedToken(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	long := "v1:1:1:0/1" + strings.Repeat(" ", consistency.MaxTokenLen)
	for _, tc := range []struct{ name, text string }{
		{"signed with the key", sign(key1, now.Unix(), long)},
		{"signed with another key", sign(key2, now.Unix(), long)},
		{"1 MiB", sign(key2, now.Unix(), strings.Repeat("A", 1<<20))},
	} {
		_, err := consistency.Verify([]byte(tc.text), [][]byte{key1}, time.Hour, now)
		if !errors.Is(err, consistency.ErrSignature) || !strings.Contains(err.Error(), "longer than any token") {
			t.Errorf("%s: Verify of a %d-byte token: %v; want ErrSignature for its length", tc.name, len(tc.text), err)
		}
	}
	if _, _, err := consistency.ParseToken([]byte(long)); err == nil || !strings.Contains(err.Error(), "longer than any token") {
		t.Errorf("ParseToken of a %d-byte token: %v; want an error for its length", len(long), err)
	}
	atCap := sign(key1, now.Unix(), "v1:1:1:0/1")
	if _, err := consistency.Verify([]byte(atCap), [][]byte{key1}, time.Hour, now); err != nil {
		t.Errorf("Verify(%q): %v", atCap, err)
	}
}

// BenchmarkVerifyOversized: Verify of a token with a wrong signature, of
// a legitimate size and far longer: with the cap, a 1 MiB token costs what
// a 300-byte one does (without it, a HMAC over 1 MiB: milliseconds).
func BenchmarkVerifyOversized(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	for _, n := range []int{100, 300, 1 << 20} {
		text := []byte(sign(key2, now.Unix(), strings.Repeat("A", n)))
		b.Run(fmt.Sprintf("%dB", len(text)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := consistency.Verify(text, [][]byte{key1}, time.Hour, now); err == nil {
					b.Fatal("verified")
				}
			}
		})
	}
}
