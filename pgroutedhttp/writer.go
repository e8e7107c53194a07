package pgroutedhttp

import (
	"bufio"
	"io"
	"net"
	"net/http"

	"github.com/pgrouted/pgrouted"
)

// responseWriter puts the token on the response's header at the moment the
// header is written. The server's own capabilities (Flush, Hijack,
// deadlines, full duplex) are reached through Unwrap, as
// http.ResponseController does, or through the methods below, which send
// the token first where they write the header.
type responseWriter struct {
	http.ResponseWriter
	o    *Options
	s    *pgrouted.Session
	tls  bool     // the request came over TLS
	in   received // what the request brought: its cookie, its token
	done bool     // the header went out (or the connection was hijacked)
}

// sendToken sets the token on the header, once, unless the header went out.
func (w *responseWriter) sendToken() {
	if w.done {
		return
	}
	w.done = true
	w.o.setToken(w.ResponseWriter.Header(), w.s, w.in, w.tls)
}

// WriteHeader implements http.ResponseWriter. An informational status
// (1xx other than 101 Switching Protocols) does not carry the token: the
// final header does.
func (w *responseWriter) WriteHeader(code int) {
	if code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
		w.sendToken()
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *responseWriter) Write(b []byte) (int, error) {
	w.sendToken()
	return w.ResponseWriter.Write(b)
}

// ReadFrom implements io.ReaderFrom, so that io.Copy to the response keeps
// the server's own (sendfile) path.
func (w *responseWriter) ReadFrom(r io.Reader) (int64, error) {
	w.sendToken()
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, r)
}

// writerOnly hides every method but Write (io.Copy would call ReadFrom).
type writerOnly struct{ io.Writer }

// Flush implements http.Flusher. It does nothing where the server's
// ResponseWriter cannot flush.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError flushes as http.ResponseController's Flush does, reporting
// its error (http.ErrNotSupported where the server's ResponseWriter cannot
// flush).
func (w *responseWriter) FlushError() error {
	w.sendToken()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker. The handler writes its own response on
// the connection: no token goes with it.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.done = true
	}
	return c, rw, err
}

// Unwrap returns the server's ResponseWriter, for http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var (
	_ http.Flusher  = (*responseWriter)(nil)
	_ http.Hijacker = (*responseWriter)(nil)
	_ io.ReaderFrom = (*responseWriter)(nil)
)
