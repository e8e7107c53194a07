//go:build unix

package pgroutedhttp_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/pgroutedhttp"
)

var (
	newKey = bytes.Repeat([]byte("n"), 32)
	oldKey = bytes.Repeat([]byte("o"), 32)
)

// signAt signs token with key as issued at issued, in the documented form
// "s1.<issued>.<token>.<mac>".
func signAt(key []byte, issued time.Time, token string) string {
	signed := fmt.Sprintf("s1.%d.%s", issued.Unix(), token)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(signed))
	return signed + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// TestSignedTokens: with Keys, a token signed with any of them and not
// expired is honoured and sent back as it came (not signed again: its
// cookie is not set again); an unsigned one, one signed with another key,
// an altered one or an expired one is ignored (a fresh Session: no token
// back, the cookie deleted) and counted, never an error.
func TestSignedTokens(t *testing.T) {
	now := time.Now()
	good := signAt(newKey, now, tokA)
	for _, tc := range []struct {
		name, header, cookie string
		maxAge               time.Duration
		accepted             bool
	}{
		{"signed with the first key", good, "", time.Hour, true},
		{"signed with the old key", signAt(oldKey, now, tokB), "", time.Hour, true},
		{"in a cookie, unknown position", "", strings.ReplaceAll(signAt(newKey, now, tokU), ";", "%3B"), time.Hour, true},
		{"nearly expired", signAt(newKey, now.Add(-58*time.Minute), tokA), "", time.Hour, true},
		{"default max age", signAt(newKey, now.Add(-23*time.Hour), tokA), "", 0, true},
		{"unsigned", tokA, "", time.Hour, false},
		{"unsigned cookie", "", tokA, time.Hour, false},
		{"another key", signAt(bytes.Repeat([]byte("x"), 32), now, tokA), "", time.Hour, false},
		{"position changed", strings.Replace(good, "3000000", "3000001", 1), "", time.Hour, false},
		{"issue time changed", strings.Replace(good, "s1.", "s1.1", 1), "", time.Hour, false},
		{"expired", signAt(newKey, now.Add(-2*time.Hour), tokA), "", time.Hour, false},
		{"expired by default", signAt(newKey, now.Add(-25*time.Hour), tokA), "", 0, false},
		{"from the future", signAt(newKey, now.Add(time.Hour), tokA), "", time.Hour, false},
		{"longer than MaxTokenLen, signed", signAt(newKey, now, tokA+strings.Repeat(" ", pgrouted.MaxTokenLen)), "", time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &pgroutedhttp.Options{Keys: [][]byte{newKey, oldKey}, MaxAge: tc.maxAge}
			req := httptest.NewRequest("GET", "/", nil)
			if tc.header != "" {
				req.Header.Set("Pgrouted-Session", tc.header)
			}
			if tc.cookie != "" {
				req.AddCookie(&http.Cookie{Name: "pgrouted_session", Value: tc.cookie})
			}
			resp := serve(o, writeOK, req)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %s", resp.Status)
			}
			sent := tc.header
			if sent == "" {
				sent = strings.ReplaceAll(tc.cookie, "%3B", ";")
			}
			got, c := resp.Header.Get("Pgrouted-Session"), sessionCookie(resp, "pgrouted_session")
			if tc.accepted {
				if got != sent || o.Rejected() != 0 {
					t.Errorf("response token %q, %d rejected; want %q back, none rejected", got, o.Rejected(), sent)
				}
				if tc.cookie != "" && c != nil {
					t.Errorf("Set-Cookie %s for an unchanged token", c)
				}
				return
			}
			if got != "" || o.Rejected() != 1 {
				t.Errorf("response token %q, %d rejected; want none back, one rejected", got, o.Rejected())
			}
			if tc.cookie != "" && (c == nil || c.MaxAge >= 0) {
				t.Errorf("Set-Cookie %v, want the cookie deleted", c)
			}
		})
	}
}

// TestShortKey: a key shorter than 32 bytes is a configuration error,
// said when the middleware is built.
func TestShortKey(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Keys[1]") {
			t.Fatalf("Middleware with a 31-byte key: recovered %v, want a panic naming Keys[1]", r)
		}
	}()
	o := &pgroutedhttp.Options{Keys: [][]byte{newKey, make([]byte, 31)}}
	o.Middleware(http.HandlerFunc(writeOK))
}

// TestSignedTokensOnACluster: an application with Keys sends signed tokens
// after a write, reads its writes back with them, and rejects and counts
// the unsigned token of the same position.
func TestSignedTokensOnACluster(t *testing.T) {
	ctx := testCtx(t)
	createItems(t, ctx)
	a, err := openApp(appDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.db.Close() })
	a.opts.Keys = [][]byte{newKey}
	srv := httptest.NewServer(a.handler())
	t.Cleanup(srv.Close)
	waitReady(t, srv.URL)
	id, token := post(t, http.DefaultClient, srv.URL, "")
	if !strings.HasPrefix(token, "s1.") {
		t.Fatalf("token after a write: %q, want a signed one", token)
	}
	if res := get(t, http.DefaultClient, srv.URL, id, token); !res.Found || a.opts.Rejected() != 0 {
		t.Fatalf("read back with the signed token: %+v, %d rejected", res, a.opts.Rejected())
	}
	unsigned := strings.Split(token, ".")[2]
	if res := get(t, http.DefaultClient, srv.URL, id, unsigned); a.opts.Rejected() != 1 {
		t.Fatalf("read with the unsigned token %q: %+v, %d rejected; want one", unsigned, res, a.opts.Rejected())
	}
}

// BenchmarkOversizedToken: a request whose signed token (header) or
// cookie is far longer than any legitimate one costs what a legitimate
// one does: it is refused for its length before it is unescaped or its
// HMAC computed (a 1 MiB token cost milliseconds of HMAC before).
func BenchmarkOversizedToken(b *testing.B) {
	now := time.Now()
	o := &pgroutedhttp.Options{Keys: [][]byte{newKey}, MaxAge: time.Hour}
	h := o.Middleware(http.HandlerFunc(writeOK))
	for _, tc := range []struct {
		name, header, cookie string
	}{
		{"legitimate", signAt(newKey, now, tokU), ""},
		{"header 1MiB", signAt(newKey, now, strings.Repeat("A", 1<<20)), ""},
		{"cookie 1MiB", "", strings.Repeat("%3B", 1<<20/3)},
	} {
		req := httptest.NewRequest("GET", "/", nil)
		if tc.header != "" {
			req.Header.Set("Pgrouted-Session", tc.header)
		}
		if tc.cookie != "" {
			req.AddCookie(&http.Cookie{Name: "pgrouted_session", Value: tc.cookie})
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}
