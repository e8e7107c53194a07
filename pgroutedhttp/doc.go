// Package pgroutedhttp carries a user's read-your-writes position between
// the instances of a service behind a load balancer, in a cookie and a
// response header, so that a user who wrote through one instance reads
// their write through any other, still from a replica.
//
// Wrap the handler:
//
//	http.ListenAndServe(addr, pgroutedhttp.Middleware(mux))
//
// and run the handler's statements with the request's context
// (db.QueryContext(r.Context(), ...)). [Middleware] reads the user's token
// from the request header Pgrouted-Session, else from the cookie
// pgrouted_session, and puts a [pgrouted.Session] restored from it in the
// request's context ([pgrouted.WithSession]): the handler's reads need that
// position on a replica (and wait up to pgrouted_replica_wait for one to
// replay it, else run on the primary), and its writes raise it. The
// updated token goes back in the same cookie (HttpOnly, SameSite=Lax,
// Path=/, Secure when the request came over TLS) and in the response header
// Pgrouted-Session, for clients that carry it by hand (another service, a
// mobile application).
//
// # When the token is written
//
// The token rides on the response's header: it is set when the handler
// writes the header (WriteHeader, its first Write, a Flush, ReadFrom), and,
// when the handler wrote nothing, when it returns. A write made after the
// header went out (while streaming a response) cannot ride on it: the
// client carries the position of the writes made before it, and a read of
// the later write in its next request may miss it on a replica. Run the
// writes before writing the response, as a POST that redirects does. A
// handler that hijacks the connection (http.Hijacker, or
// http.ResponseController's Hijack) before writing the header writes its
// own response: no token goes with it. Informational responses (1xx other
// than 101) do not carry it; the final one does.
//
// The ResponseWriter the handler gets implements http.Flusher,
// http.Hijacker and io.ReaderFrom, and Unwrap for
// http.ResponseController: each reaches the server's own ResponseWriter
// (Flush does nothing, and Hijack fails, where that one cannot).
//
// # What the token says
//
// The token is pgrouted.Session's text, "v1:<system identifier>:<timeline>:<LSN>"
// (hexadecimal), with ";unknown" after it when the position of the user's
// last write could not be read (in the cookie, ";" is written "%3B"). It is
// not a secret and grants nothing, but it is not opaque: it shows the
// database cluster's system identifier (chosen when the cluster was
// created; it tells one cluster from another), the timeline (how many
// promotions its history has seen) and the WAL position of the user's last
// write, so two tokens show how many bytes of WAL the whole cluster wrote
// between them: its rate of writes.
//
// # Tokens that cannot be trusted
//
// A client can send anything. A token longer than [pgrouted.MaxTokenLen]
// (256 bytes; the longest legitimate one is 123, signed, in a cookie) is
// ignored and counted for its length alone, before it is unescaped,
// verified or parsed: a 1 MiB cookie costs a request what a legitimate one
// does. A token that does not parse, or that names
// another cluster (another system identifier: a stale cookie after the
// database was replaced, a token of another service sharing the domain), is
// ignored: the request runs with a fresh Session, as a first visit would,
// and the token is counted ([Options.Rejected]); never an error response.
// A malformed one is found when the request arrives; a foreign one when the
// handler's first read compares it with the cluster (see
// [pgrouted.Session.IgnoreForeign]). The response then deletes the cookie,
// unless the handler wrote.
//
// A token with this cluster's identifier and a position the cluster has not
// written (forged: ahead of the primary, or on a later timeline than the
// primary's) is found by the handler's first read: not shown written by
// any position of the primary the process knows, the read asks the
// primary (one query shared by the reads that wait for it), and when the
// primary has not written it either, the read runs as one without a
// token, and the token is counted too (here and in
// pgrouted.Stats.ForgedTokens, as a token of another cluster is). Such a token changes
// nothing for the other users: a replica wait that misses it does not stop
// theirs, waits hold at most half of a replica's pool, and after a
// failover an unsigned token is never reported as a lost write. A client
// could as well not send its cookie (and read its own writes stale).
//
// # Signed tokens
//
// With [Options].Keys the tokens are signed (HMAC-SHA256, the first key
// signs, each verifies, so keys rotate; see
// [pgrouted.Session.MarshalSigned] for the form,
// "s1.<issued>.<token>.<mac>"), and a token that is not signed, whose
// signature does not verify with any key, or that is older than
// [Options].MaxAge ([DefaultTokenMaxAge] when 0) is ignored and counted
// ([Options.Rejected]), never an error response:
//
//	opts := &pgroutedhttp.Options{Keys: [][]byte{key}, MaxAge: time.Hour}
//
// Each key is a secret of at least 32 random bytes, the same in every
// instance. A response whose Session did not change sends the request's
// token back as it came (the cookie is not set again).
//
// # Options
//
// [Middleware] uses [DefaultOptions]. An [Options] value sets the cookie's
// name, the header's name, the cookie's Max-Age and Secure attribute, and
// the keys that sign the tokens:
//
//	opts := &pgroutedhttp.Options{CookieName: "rw", MaxAge: time.Hour}
//	handler := opts.Middleware(mux)
//
// A token matters only until every replica has replayed its position
// (usually well under a second; at most pgrouted_max_lag when one is set):
// a cookie that expires later than that costs nothing, one that expires
// earlier lets a read miss the user's write on a lagging replica.
package pgroutedhttp
