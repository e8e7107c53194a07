//go:build unix

package pgroutedhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/pgroutedhttp"
)

const (
	tokA = "v1:1A:1:0/3000000"
	tokB = "v1:1A:1:0/4000000"
	tokU = "v1:1A:1:0/3000000;unknown"
	// tokUCookie is tokU as a cookie holds it.
	tokUCookie = "v1:1A:1:0/3000000%3Bunknown"
)

func writeOK(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }

// serve runs one request through o's middleware around h.
func serve(o *pgroutedhttp.Options, h http.HandlerFunc, req *http.Request) *http.Response {
	rec := httptest.NewRecorder()
	o.Middleware(h).ServeHTTP(rec, req)
	return rec.Result()
}

func sessionCookie(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// TestTokenPrecedence: the header's token takes precedence over the
// cookie's; the response carries the Session's token in the header, and
// in the cookie when the request's cookie does not hold it already; an
// unusable token is ignored and counted, and its cookie deleted.
func TestTokenPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name, header, cookie string
		wantHeader           string
		wantCookie           string // "-": no Set-Cookie; "delete": deleted
		rejected             uint64
	}{
		{"header over cookie", tokA, tokB, tokA, tokA, 0},
		{"cookie alone, unchanged", "", tokB, tokB, "-", 0},
		{"header alone", tokA, "", tokA, tokA, 0},
		{"unknown position in a cookie", "", tokUCookie, tokU, "-", 0},
		{"unknown position in a header", tokU, "", tokU, tokUCookie, 0},
		{"none", "", "", "", "-", 0},
		{"garbage header over a cookie", "garbage", tokB, "", "delete", 1},
		{"garbage cookie", "", "v1:1A:1", "", "delete", 1},
		{"too long", strings.Repeat("v1:1A:1:0/3000000", 100), "", "", "-", 1},
		{"too long cookie", "", strings.Repeat("%3B", 1<<16), "", "delete", 1},
		{"unsupported version", "v9:1A:1:0/1", "", "", "-", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &pgroutedhttp.Options{}
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
			if got := resp.Header.Get("Pgrouted-Session"); got != tc.wantHeader {
				t.Errorf("response header %q, want %q", got, tc.wantHeader)
			}
			c := sessionCookie(resp, "pgrouted_session")
			switch {
			case tc.wantCookie == "-":
				if c != nil {
					t.Errorf("Set-Cookie %s, want none", c)
				}
			case tc.wantCookie == "delete":
				if c == nil || c.MaxAge >= 0 || c.Value != "" {
					t.Errorf("Set-Cookie %v, want the cookie deleted", c)
				}
			case c == nil || c.Value != tc.wantCookie:
				t.Errorf("Set-Cookie %v, want value %q", c, tc.wantCookie)
			}
			if n := o.Rejected(); n != tc.rejected {
				t.Errorf("Rejected() = %d, want %d", n, tc.rejected)
			}
		})
	}
}

// TestDefaultOptions: Middleware counts on DefaultOptions.
func TestDefaultOptions(t *testing.T) {
	before := pgroutedhttp.DefaultOptions.Rejected()
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("Pgrouted-Session", "garbage")
	rec := httptest.NewRecorder()
	pgroutedhttp.Middleware(http.HandlerFunc(writeOK)).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Fatalf("response %d %q", rec.Code, rec.Body)
	}
	if n := pgroutedhttp.DefaultOptions.Rejected() - before; n != 1 {
		t.Fatalf("DefaultOptions counted %d rejected tokens, want 1", n)
	}
}

func TestCookieAttributes(t *testing.T) {
	check := func(t *testing.T, c *http.Cookie, name string, secure bool, maxAge int) {
		t.Helper()
		if c == nil {
			t.Fatalf("no cookie %s", name)
		}
		if c.Path != "/" || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Secure != secure || c.MaxAge != maxAge {
			t.Fatalf("cookie %s, want Path=/ HttpOnly SameSite=Lax Secure=%v MaxAge=%d", c, secure, maxAge)
		}
	}
	t.Run("default", func(t *testing.T) {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("Pgrouted-Session", tokA)
		check(t, sessionCookie(serve(&pgroutedhttp.Options{}, writeOK, req), "pgrouted_session"), "pgrouted_session", false, 0)
	})
	t.Run("TLS", func(t *testing.T) {
		req := httptest.NewRequest("GET", "https://example.com/", nil)
		req.TLS = &tls.ConnectionState{}
		req.Header.Set("Pgrouted-Session", tokA)
		check(t, sessionCookie(serve(&pgroutedhttp.Options{}, writeOK, req), "pgrouted_session"), "pgrouted_session", true, 0)
	})
	t.Run("options", func(t *testing.T) {
		o := &pgroutedhttp.Options{CookieName: "rw", HeaderName: "X-Rw", MaxAge: 1500 * time.Millisecond, Secure: true}
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-Rw", tokA)
		req.Header.Set("Pgrouted-Session", tokB) // not this middleware's header
		req.AddCookie(&http.Cookie{Name: "pgrouted_session", Value: tokB})
		resp := serve(o, writeOK, req)
		check(t, sessionCookie(resp, "rw"), "rw", true, 2)
		if c := sessionCookie(resp, "rw"); c.Value != tokA {
			t.Fatalf("cookie %s, want value %s", c, tokA)
		}
		if h := resp.Header.Get("X-Rw"); h != tokA {
			t.Fatalf("X-Rw %q, want %q", h, tokA)
		}
		// The cookie named rw is read back.
		req = httptest.NewRequest("GET", "/", nil)
		req.AddCookie(&http.Cookie{Name: "rw", Value: tokB})
		if h := serve(o, writeOK, req).Header.Get("X-Rw"); h != tokB {
			t.Fatalf("X-Rw %q from the rw cookie, want %q", h, tokB)
		}
	})
}

// server serves h behind the middleware (request token tokA) on a real
// HTTP/1.1 server whose error log must stay empty.
func server(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	var logged bytes.Buffer
	srv := httptest.NewUnstartedServer(pgroutedhttp.Middleware(h))
	srv.Config.ErrorLog = log.New(&logged, "", 0)
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		if logged.Len() > 0 {
			t.Errorf("server logged: %s", logged.String())
		}
	})
	return srv
}

func request(t *testing.T, srv *httptest.Server, ctx context.Context) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Pgrouted-Session", tokA)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestFlush: a Flush, through http.Flusher or http.ResponseController,
// sends the header with the token before the handler writes anything;
// ResponseController reaches the server's deadlines through Unwrap.
func TestFlush(t *testing.T) {
	for _, how := range []string{"Flusher", "ResponseController"} {
		t.Run(how, func(t *testing.T) {
			release := make(chan struct{})
			srv := server(t, func(w http.ResponseWriter, r *http.Request) {
				if how == "Flusher" {
					w.(http.Flusher).Flush()
				} else {
					rc := http.NewResponseController(w)
					if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
						t.Errorf("SetWriteDeadline: %v", err)
					}
					if err := rc.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
						t.Errorf("SetReadDeadline: %v", err)
					}
					if err := rc.Flush(); err != nil {
						t.Errorf("Flush: %v", err)
					}
				}
				<-release
				io.WriteString(w, "body")
			})
			resp := request(t, srv, context.Background())
			// The header arrived while the handler waits.
			if h := resp.Header.Get("Pgrouted-Session"); h != tokA {
				t.Errorf("header at the flush %q, want %q", h, tokA)
			}
			if c := sessionCookie(resp, "pgrouted_session"); c == nil || c.Value != tokA {
				t.Errorf("cookie at the flush %v, want %s", c, tokA)
			}
			close(release)
			if b, _ := io.ReadAll(resp.Body); string(b) != "body" {
				t.Errorf("body %q", b)
			}
		})
	}
}

// TestHijack: a handler that hijacks the connection writes its own
// response; the middleware adds nothing to it and writes nothing after.
func TestHijack(t *testing.T) {
	for _, how := range []string{"Hijacker", "ResponseController"} {
		t.Run(how, func(t *testing.T) {
			srv := server(t, func(w http.ResponseWriter, r *http.Request) {
				var c net.Conn
				var rw *bufio.ReadWriter
				var err error
				if how == "Hijacker" {
					c, rw, err = w.(http.Hijacker).Hijack()
				} else {
					c, rw, err = http.NewResponseController(w).Hijack()
				}
				if err != nil {
					t.Errorf("Hijack: %v", err)
					return
				}
				defer c.Close()
				rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nraw ok")
				rw.Flush()
			})
			resp := request(t, srv, context.Background())
			if b, _ := io.ReadAll(resp.Body); string(b) != "raw ok" {
				t.Fatalf("body %q", b)
			}
			if h := resp.Header.Get("Pgrouted-Session"); h != "" {
				t.Fatalf("hijacked response carries %q", h)
			}
		})
	}
}

// TestWhenWritten: the token goes with the header however it is written
// (WriteHeader, Write, ReadFrom, nothing at all), and with the final
// header, not an informational one.
func TestWhenWritten(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"WriteHeader": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) },
		"Write":       writeOK,
		"ReadFrom":    func(w http.ResponseWriter, r *http.Request) { io.Copy(w, strings.NewReader("copied")) },
		"nothing":     func(w http.ResponseWriter, r *http.Request) {},
		"early hints": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			io.WriteString(w, "ok")
		},
	} {
		t.Run(name, func(t *testing.T) {
			srv := server(t, h)
			var hints []textproto.MIMEHeader
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					hints = append(hints, h)
					return nil
				},
			})
			resp := request(t, srv, ctx)
			if h := resp.Header.Get("Pgrouted-Session"); h != tokA {
				t.Errorf("header %q, want %q", h, tokA)
			}
			if c := sessionCookie(resp, "pgrouted_session"); c == nil || c.Value != tokA {
				t.Errorf("cookie %v, want %s", c, tokA)
			}
			for _, h := range hints {
				if h.Get("Pgrouted-Session") != "" || h.Get("Set-Cookie") != "" {
					t.Errorf("an informational response carries the token: %v", h)
				}
			}
			if name == "early hints" && len(hints) != 1 {
				t.Errorf("%d informational responses, want 1", len(hints))
			}
		})
	}
}

// TestTokenFollowsWrites, on the cluster: a write raises the token the
// response carries; a read leaves it (and sets no cookie); a write made
// after the header went out is not in it.
func TestTokenFollowsWrites(t *testing.T) {
	ctx := testCtx(t)
	createItems(t, ctx)
	_, base := startApp(t)
	waitReady(t, base)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar}
	lsn := func(token string) lagmeter.LSN {
		t.Helper()
		i := strings.LastIndexByte(token, ':')
		l, err := lagmeter.ParseLSN(token[i+1:])
		if i < 0 || err != nil {
			t.Fatalf("token %q: %v", token, err)
		}
		return l
	}
	id1, t1 := post(t, c, base, "")
	_, t2 := post(t, c, base, "")
	if lsn(t2) <= lsn(t1) {
		t.Fatalf("second write's token %s not after the first's %s", t2, t1)
	}
	req, _ := http.NewRequest("GET", base+"/items/"+strconv.FormatInt(id1, 10), nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := resp.Header.Get("Pgrouted-Session"); h != t2 {
		t.Fatalf("token after a read %q, want %q", h, t2)
	}
	if len(resp.Cookies()) != 0 {
		t.Fatalf("a read that changed nothing set %v", resp.Cookies())
	}
	req, _ = http.NewRequest("POST", base+"/late", nil)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || len(b) != 0 {
		t.Fatalf("POST /late: %s %s", resp.Status, b)
	}
	if h := resp.Header.Get("Pgrouted-Session"); h != t2 {
		t.Fatalf("token of a response whose write came after its header %q, want the one before it, %q", h, t2)
	}
}
