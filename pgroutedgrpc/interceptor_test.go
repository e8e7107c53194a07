package pgroutedgrpc_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/pgroutedgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// These tests need no database: a handler "writes" by moving its
// Session to a later position (UnmarshalText), as a write would raise it.

// pos is a Session's text at LSN lsn on timeline 1 of system 0xABC.
func pos(lsn uint32) string { return fmt.Sprintf("v1:ABC:1:0/%X", lsn) }

// sessionAt returns a Session restored from text.
func sessionAt(t testing.TB, text string) *pgrouted.Session {
	t.Helper()
	s := pgrouted.NewSession()
	if err := s.UnmarshalText([]byte(text)); err != nil {
		t.Fatal(err)
	}
	return s
}

// textOf is s's text.
func textOf(t testing.TB, s *pgrouted.Session) string {
	t.Helper()
	b, err := s.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// write moves the Session of ctx to text, as a write would.
func write(ctx context.Context, text string) error {
	s := pgroutedgrpc.SessionFrom(ctx)
	if s == nil {
		return errors.New("no Session in the handler's context")
	}
	return s.UnmarshalText([]byte(text))
}

// sessionText is the text of the Session of ctx.
func sessionText(ctx context.Context) (string, error) {
	s := pgroutedgrpc.SessionFrom(ctx)
	if s == nil {
		return "", errors.New("no Session in the handler's context")
	}
	b, err := s.MarshalText()
	return string(b), err
}

// bufServer serves sv with the server interceptors of so (none when nil)
// over an in-memory connection, and returns a dialer for it.
func bufServer(t testing.TB, sv *service, so *pgroutedgrpc.Options) func(co *pgroutedgrpc.Options) *grpc.ClientConn {
	t.Helper()
	ln := bufconn.Listen(1 << 20)
	var opts []grpc.ServerOption
	if so != nil {
		opts = serverOptions(so)
	}
	serve(t, ln, sv, opts...)
	return func(co *pgroutedgrpc.Options) *grpc.ClientConn {
		t.Helper()
		cc, err := grpc.NewClient("passthrough:///bufnet", append(dialOptions(co),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
}

// unaryService: Echo answers the text of the handler's Session; Write
// moves it to the request's text; WriteFail does and fails; Fresh
// answers whether the Session is a new one each call.
func unaryService() *service {
	return &service{unary: map[string]unaryFunc{
		"Echo": func(ctx context.Context, _ string) (string, error) { return sessionText(ctx) },
		"Write": func(ctx context.Context, in string) (string, error) {
			return "", write(ctx, in)
		},
		"WriteFail": func(ctx context.Context, in string) (string, error) {
			if err := write(ctx, in); err != nil {
				return "", err
			}
			return "", status.Error(codes.FailedPrecondition, "failed after its write")
		},
	}}
}

// TestUnaryCarriesTheSession: the caller's Session reaches the handler;
// the handler's writes come back (in the trailer) and are merged: a later
// position replaces the caller's, an earlier one does not, a later
// timeline does, another cluster's is ignored and counted; a handler that
// only reads sends nothing back; a failed call brings its writes back too.
func TestUnaryCarriesTheSession(t *testing.T) {
	ctx := context.Background()
	so, co := &pgroutedgrpc.Options{}, &pgroutedgrpc.Options{}
	cc := bufServer(t, unaryService(), so)(co)

	s := sessionAt(t, pos(0x100))
	sctx := pgroutedgrpc.WithSession(ctx, s)
	var trailer metadata.MD
	if got, err := call(sctx, cc, "Echo", "", grpc.Trailer(&trailer)); err != nil || got != pos(0x100) {
		t.Fatalf("Echo: handler's Session %q, %v; want %q", got, err, pos(0x100))
	}
	if v := trailer.Get(pgroutedgrpc.MetadataKey); len(v) != 0 {
		t.Errorf("a handler that did not write sent a token back: %q", v)
	}

	steps := []struct {
		write, want string
		rejected    uint64
	}{
		{pos(0x200), pos(0x200), 0},             // later: merged
		{pos(0x180), pos(0x200), 0},             // earlier than the caller's: kept
		{"v1:ABC:2:0/10", "v1:ABC:2:0/10", 0},   // a later timeline
		{"v1:ABD:2:0/FFFF", "v1:ABC:2:0/10", 1}, // another cluster: ignored, counted
		{"v1:ABC:2:0/20;unknown", "v1:ABC:2:0/20;unknown", 0},
	}
	for _, st := range steps {
		before := co.Rejected()
		if _, err := call(sctx, cc, "Write", st.write); err != nil {
			t.Fatalf("Write %s: %v", st.write, err)
		}
		if got := textOf(t, s); got != st.want {
			t.Errorf("after the handler wrote %s: caller's Session %q, want %q", st.write, got, st.want)
		}
		if n := co.Rejected() - before; n != st.rejected {
			t.Errorf("after the handler wrote %s: client rejected %d tokens, want %d", st.write, n, st.rejected)
		}
	}

	// A failed call brings its writes back.
	s = sessionAt(t, pos(0x100))
	sctx = pgroutedgrpc.WithSession(ctx, s)
	if _, err := call(sctx, cc, "WriteFail", pos(0x300)); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("WriteFail: %v, want FailedPrecondition", err)
	}
	if got := textOf(t, s); got != pos(0x300) {
		t.Errorf("after a failed call that wrote: caller's Session %q, want %q", got, pos(0x300))
	}

	// Without a Session in the context nothing is sent: the handler gets
	// a fresh one each call.
	for range 2 {
		if _, err := call(ctx, cc, "Write", pos(0x400)); err != nil {
			t.Fatal(err)
		}
		if got, err := call(ctx, cc, "Echo", ""); err != nil || got != "" {
			t.Fatalf("Echo without a Session: %q, %v; want a fresh Session", got, err)
		}
	}
	if so.Rejected() != 0 {
		t.Errorf("server rejected %d tokens, want 0", so.Rejected())
	}
}

// TestServerIgnoresUntrustedTokens: a token that does not parse reaches
// the handler as a fresh Session, counted, never an error; a client
// without the interceptors gets no error either.
func TestServerIgnoresUntrustedTokens(t *testing.T) {
	so := &pgroutedgrpc.Options{}
	cc := bufServer(t, unaryService(), so)(nil)
	for _, token := range []string{"garbage", "v1:1:1:0/1;unknown;unknown", "s1.1.v1:1:1:0/1.mac", pos(0x100) + " "} {
		before := so.Rejected()
		ctx := metadata.AppendToOutgoingContext(context.Background(), pgroutedgrpc.MetadataKey, token)
		if got, err := call(ctx, cc, "Echo", ""); err != nil || got != "" {
			t.Errorf("token %q: handler's Session %q, %v; want a fresh one", token, got, err)
		}
		if n := so.Rejected() - before; n != 1 {
			t.Errorf("token %q: rejected %d, want 1", token, n)
		}
	}
	// A well-formed one, sent by hand, is restored.
	ctx := metadata.AppendToOutgoingContext(context.Background(), pgroutedgrpc.MetadataKey, pos(0x42))
	if got, err := call(ctx, cc, "Echo", ""); err != nil || got != pos(0x42) {
		t.Errorf("a token sent by hand: %q, %v", got, err)
	}
}

// key returns a signing key of 32 bytes made of b.
func key(b byte) []byte { return []byte(strings.Repeat(string(rune(b)), 32)) }

// signed is text signed with key, issued at issued (the form of
// pgrouted.Session.MarshalSigned, built here so that its time can be
// chosen).
func signed(text string, key []byte, issued time.Time) string {
	body := "s1." + strconv.FormatInt(issued.Unix(), 10) + "." + text
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(body))
	return body + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// TestSignedTokens: with Keys, the client signs what it sends and the
// server what it sends back; unsigned, forged, expired tokens and tokens
// of another key are ignored and counted on either side; keys rotate.
func TestSignedTokens(t *testing.T) {
	ctx := context.Background()
	k1, k2 := key('1'), key('2')
	so := &pgroutedgrpc.Options{Keys: [][]byte{k1}, MaxAge: time.Hour}
	dial := bufServer(t, unaryService(), so)

	// Both sides hold k1.
	co := &pgroutedgrpc.Options{Keys: [][]byte{k1}}
	cc := dial(co)
	s := sessionAt(t, pos(0x100))
	sctx := pgroutedgrpc.WithSession(ctx, s)
	if got, err := call(sctx, cc, "Echo", ""); err != nil || got != pos(0x100) {
		t.Fatalf("signed: handler's Session %q, %v", got, err)
	}
	if _, err := call(sctx, cc, "Write", pos(0x200)); err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, s); got != pos(0x200) {
		t.Errorf("signed: caller's Session after the handler's write %q, want %q", got, pos(0x200))
	}
	if so.Rejected()+co.Rejected() != 0 {
		t.Fatalf("signed tokens rejected: server %d, client %d", so.Rejected(), co.Rejected())
	}

	// Tokens the server must ignore, sent by hand.
	now := time.Now()
	for _, token := range []string{
		pos(0x100),                  // unsigned
		signed(pos(0x100), k2, now), // another key
		signed(pos(0x100), k1, now.Add(-2*time.Hour)), // expired (MaxAge 1h)
		signed(pos(0x100), k1, now)[:60] + "x",        // forged
	} {
		before := so.Rejected()
		mctx := metadata.AppendToOutgoingContext(ctx, pgroutedgrpc.MetadataKey, token)
		if got, err := call(mctx, dial(nil), "Echo", ""); err != nil || got != "" {
			t.Errorf("token %q: handler's Session %q, %v; want a fresh one", token, got, err)
		}
		if n := so.Rejected() - before; n != 1 {
			t.Errorf("token %q: rejected %d, want 1", token, n)
		}
	}
	if got, err := call(metadata.AppendToOutgoingContext(ctx, pgroutedgrpc.MetadataKey, signed(pos(0x77), k1, now.Add(-30*time.Minute))), dial(nil), "Echo", ""); err != nil || got != pos(0x77) {
		t.Errorf("a token signed 30 minutes ago (MaxAge 1h): %q, %v", got, err)
	}

	// A client holding k2 only: the server ignores its token, and it
	// ignores the server's (signed with k1).
	co2 := &pgroutedgrpc.Options{Keys: [][]byte{k2}}
	cc2 := dial(co2)
	s = sessionAt(t, pos(0x100))
	sctx = pgroutedgrpc.WithSession(ctx, s)
	before := so.Rejected()
	if _, err := call(sctx, cc2, "Write", pos(0x200)); err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, s); got != pos(0x100) {
		t.Errorf("a token sent back with another key was merged: %q", got)
	}
	if so.Rejected()-before != 1 || co2.Rejected() != 1 {
		t.Errorf("another key: server rejected %d, client %d; want 1 and 1", so.Rejected()-before, co2.Rejected())
	}

	// Rotation: a client signing with k2 and verifying k1 too, a server
	// that verifies k2 and k1, signing with k1: both accept.
	so3 := &pgroutedgrpc.Options{Keys: [][]byte{k1, k2}}
	co3 := &pgroutedgrpc.Options{Keys: [][]byte{k2, k1}}
	cc3 := bufServer(t, unaryService(), so3)(co3)
	s = sessionAt(t, pos(0x100))
	sctx = pgroutedgrpc.WithSession(ctx, s)
	if got, err := call(sctx, cc3, "Echo", ""); err != nil || got != pos(0x100) {
		t.Errorf("rotation: handler's Session %q, %v", got, err)
	}
	if _, err := call(sctx, cc3, "Write", pos(0x300)); err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, s); got != pos(0x300) || so3.Rejected()+co3.Rejected() != 0 {
		t.Errorf("rotation: caller's Session %q, rejected %d and %d", got, so3.Rejected(), co3.Rejected())
	}

	// A key shorter than 32 bytes: every constructor panics.
	short := &pgroutedgrpc.Options{Keys: [][]byte{k1, []byte("short")}}
	for name, build := range map[string]func(){
		"UnaryServerInterceptor":  func() { short.UnaryServerInterceptor() },
		"StreamServerInterceptor": func() { short.StreamServerInterceptor() },
		"UnaryClientInterceptor":  func() { short.UnaryClientInterceptor() },
		"StreamClientInterceptor": func() { short.StreamClientInterceptor() },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Keys[1]") {
					t.Errorf("%s with a short key: recovered %v, want a panic naming Keys[1]", name, r)
				}
			}()
			build()
		}()
	}
}

// streamService: Stream (server-streaming) moves its Session to each
// token of the request (space-separated), sending one message after each
// and waiting for proceed before the next; Collect (client-streaming)
// moves it to its last message and answers once; Chat (bidirectional)
// moves it to each message and answers each; Header moves it and sends
// its header with a key of its own.
func streamService(proceed <-chan struct{}) *service {
	return &service{streams: []grpc.StreamDesc{
		{StreamName: "Stream", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			for i, token := range strings.Fields(in.GetValue()) {
				if i > 0 && !wait(ss, proceed) {
					return ss.Context().Err()
				}
				if err := write(ss.Context(), token); err != nil {
					return err
				}
				if err := ss.SendMsg(wrapperspb.String(token)); err != nil {
					return err
				}
			}
			return nil
		}},
		{StreamName: "Collect", ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			last := ""
			for {
				in := new(wrapperspb.StringValue)
				err := ss.RecvMsg(in)
				if err == io.EOF {
					break
				}
				if err != nil {
					return err
				}
				last = in.GetValue()
			}
			if err := write(ss.Context(), last); err != nil {
				return err
			}
			return ss.SendMsg(wrapperspb.String(last))
		}},
		{StreamName: "Chat", ClientStreams: true, ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			for {
				in := new(wrapperspb.StringValue)
				err := ss.RecvMsg(in)
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				if err := write(ss.Context(), in.GetValue()); err != nil {
					return err
				}
				if err := ss.SendMsg(in); err != nil {
					return err
				}
			}
		}},
		{StreamName: "Header", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			if err := write(ss.Context(), in.GetValue()); err != nil {
				return err
			}
			if err := ss.SendHeader(metadata.Pairs("own-key", "own-value")); err != nil {
				return err
			}
			if !wait(ss, proceed) {
				return ss.Context().Err()
			}
			return ss.SendMsg(in)
		}},
	}}
}

// wait waits for proceed, or for the end of the stream (false).
func wait(ss grpc.ServerStream, proceed <-chan struct{}) bool {
	select {
	case <-proceed:
		return true
	case <-ss.Context().Done():
		return false
	}
}

// newStream opens the stream name of the streamService with ctx; the
// stream ends with the test.
func newStream(t *testing.T, ctx context.Context, cc *grpc.ClientConn, name string) grpc.ClientStream {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	sv := streamService(nil)
	for i := range sv.streams {
		if sv.streams[i].StreamName == name {
			cs, err := cc.NewStream(ctx, &sv.streams[i], fullMethod(name))
			if err != nil {
				t.Fatal(err)
			}
			return cs
		}
	}
	t.Fatalf("no stream %s", name)
	return nil
}

// recv receives one message of cs and fails the test unless it is want
// (io.EOF: the stream's end).
func recv(t *testing.T, cs grpc.ClientStream, want any) {
	t.Helper()
	m := new(wrapperspb.StringValue)
	err := cs.RecvMsg(m)
	if want == io.EOF {
		if err != io.EOF {
			t.Fatalf("RecvMsg: %v %q, want io.EOF", err, m.GetValue())
		}
		return
	}
	if err != nil || m.GetValue() != want {
		t.Fatalf("RecvMsg: %q, %v; want %q", m.GetValue(), err, want)
	}
}

func send(t *testing.T, cs grpc.ClientStream, v string) {
	t.Helper()
	if err := cs.SendMsg(wrapperspb.String(v)); err != nil {
		t.Fatal(err)
	}
}

// TestStreams: a streaming handler's writes made before its first message
// reach the caller's Session with that message, while the stream is
// still open (the header); the later ones when the stream ends (the
// trailer); client-streaming and bidirectional calls too; a handler's own
// SendHeader carries the token beside its own keys.
func TestStreams(t *testing.T) {
	proceed := make(chan struct{}, 1)
	so, co := &pgroutedgrpc.Options{}, &pgroutedgrpc.Options{}
	cc := bufServer(t, streamService(proceed), so)(co)
	bg := context.Background()

	t.Run("server-streaming", func(t *testing.T) {
		s := sessionAt(t, pos(0x100))
		cs := newStream(t, pgroutedgrpc.WithSession(bg, s), cc, "Stream")
		send(t, cs, pos(0x200)+" "+pos(0x300))
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		recv(t, cs, pos(0x200))
		// The handler waits for proceed: only the header can have told.
		if got := textOf(t, s); got != pos(0x200) {
			t.Fatalf("after the first message: caller's Session %q, want %q (the header's token)", got, pos(0x200))
		}
		proceed <- struct{}{}
		recv(t, cs, pos(0x300))
		if got := textOf(t, s); got != pos(0x200) {
			t.Fatalf("after the second message, before the end: %q, want %q", got, pos(0x200))
		}
		recv(t, cs, io.EOF)
		if got := textOf(t, s); got != pos(0x300) {
			t.Fatalf("at the stream's end: caller's Session %q, want %q (the trailer's token)", got, pos(0x300))
		}
	})

	t.Run("client-streaming", func(t *testing.T) {
		s := sessionAt(t, pos(0x100))
		cs := newStream(t, pgroutedgrpc.WithSession(bg, s), cc, "Collect")
		send(t, cs, pos(0x150))
		send(t, cs, pos(0x250))
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		recv(t, cs, pos(0x250))
		if got := textOf(t, s); got != pos(0x250) {
			t.Fatalf("after the one response: caller's Session %q, want %q", got, pos(0x250))
		}
	})

	t.Run("bidirectional", func(t *testing.T) {
		s := sessionAt(t, pos(0x100))
		cs := newStream(t, pgroutedgrpc.WithSession(bg, s), cc, "Chat")
		send(t, cs, pos(0x210))
		recv(t, cs, pos(0x210))
		if got := textOf(t, s); got != pos(0x210) {
			t.Fatalf("after the first answer: %q, want %q", got, pos(0x210))
		}
		send(t, cs, pos(0x220))
		recv(t, cs, pos(0x220))
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		recv(t, cs, io.EOF)
		if got := textOf(t, s); got != pos(0x220) {
			t.Fatalf("at the end: %q, want %q", got, pos(0x220))
		}
	})

	t.Run("SendHeader", func(t *testing.T) {
		s := sessionAt(t, pos(0x100))
		cs := newStream(t, pgroutedgrpc.WithSession(bg, s), cc, "Header")
		send(t, cs, pos(0x500))
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		md, err := cs.Header()
		if err != nil {
			t.Fatal(err)
		}
		if got := md.Get("own-key"); len(got) != 1 || got[0] != "own-value" {
			t.Errorf("header's own key: %q", got)
		}
		if got := textOf(t, s); got != pos(0x500) {
			t.Errorf("after Header, before any message: caller's Session %q, want %q", got, pos(0x500))
		}
		proceed <- struct{}{}
		recv(t, cs, pos(0x500))
		recv(t, cs, io.EOF)
	})
	if so.Rejected()+co.Rejected() != 0 {
		t.Errorf("rejected: server %d, client %d", so.Rejected(), co.Rejected())
	}
}

// TestCallChain: client -> A -> B in one process. A's handler calls B
// with its own context: B's handler sees the client's Session, and B's
// write comes back to A's Session and from A to the client's.
func TestCallChain(t *testing.T) {
	opts := &pgroutedgrpc.Options{}
	toB := bufServer(t, unaryService(), opts)(opts)
	a := &service{unary: map[string]unaryFunc{
		// Relay asks B for its Session's text, then has B write in, and
		// answers B's text.
		"Relay": func(ctx context.Context, in string) (string, error) {
			seen, err := call(ctx, toB, "Echo", "")
			if err != nil {
				return "", err
			}
			if _, err := call(ctx, toB, "Write", in); err != nil {
				return "", err
			}
			mine, err := sessionText(ctx)
			return seen + " " + mine, err
		},
	}}
	cc := bufServer(t, a, opts)(opts)
	s := sessionAt(t, pos(0x100))
	got, err := call(pgroutedgrpc.WithSession(context.Background(), s), cc, "Relay", pos(0x900))
	if err != nil {
		t.Fatal(err)
	}
	if want := pos(0x100) + " " + pos(0x900); got != want {
		t.Errorf("B saw, A then held: %q, want %q", got, want)
	}
	if got := textOf(t, s); got != pos(0x900) {
		t.Errorf("the client's Session after B's write: %q, want %q", got, pos(0x900))
	}
}

// TestTokenRestore: Options.Token and Options.Restore, for jobs and
// queues: a round trip, signed or not; "" and nil; a token that cannot be
// trusted restores a fresh Session, counted.
func TestTokenRestore(t *testing.T) {
	for _, o := range []*pgroutedgrpc.Options{{}, {Keys: [][]byte{key('k')}}} {
		if tok, err := o.Token(nil); err != nil || tok != "" {
			t.Errorf("Token(nil): %q, %v", tok, err)
		}
		if tok, err := o.Token(pgrouted.NewSession()); err != nil || tok != "" {
			t.Errorf("Token of a Session without writes: %q, %v", tok, err)
		}
		tok, err := o.Token(sessionAt(t, pos(0x100)))
		if err != nil {
			t.Fatal(err)
		}
		if signed := strings.HasPrefix(tok, "s1."); signed != (len(o.Keys) > 0) {
			t.Errorf("Keys %d: token %q", len(o.Keys), tok)
		}
		if got := textOf(t, o.Restore(tok)); got != pos(0x100) {
			t.Errorf("Restore(Token(s)): %q, want %q", got, pos(0x100))
		}
		if got := textOf(t, o.Restore("")); got != "" || o.Rejected() != 0 {
			t.Errorf(`Restore(""): %q, rejected %d`, got, o.Rejected())
		}
		if got := textOf(t, o.Restore("garbage")); got != "" || o.Rejected() != 1 {
			t.Errorf(`Restore("garbage"): %q, rejected %d`, got, o.Rejected())
		}
	}
}
