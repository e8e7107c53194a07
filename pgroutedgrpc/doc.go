// Package pgroutedgrpc carries a user's read-your-writes position from
// service to service over gRPC, so that a read in service B sees what
// service A wrote earlier in the same call chain, and A's later reads see
// what B wrote, still from replicas.
//
// Install the interceptors on both sides:
//
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(pgroutedgrpc.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(pgroutedgrpc.StreamServerInterceptor()))
//	cc, err := grpc.NewClient(target, creds,
//		grpc.WithChainUnaryInterceptor(pgroutedgrpc.UnaryClientInterceptor()),
//		grpc.WithChainStreamInterceptor(pgroutedgrpc.StreamClientInterceptor()))
//
// and run each handler's statements, and its calls to other services,
// with the handler's context. The server interceptors restore the caller's
// [pgrouted.Session] from the request metadata [MetadataKey]
// ("pgrouted-session"), or start a fresh one, and put it in the handler's
// context ([WithSession]): the handler's reads need that position on a
// replica (waiting up to pgrouted_replica_wait for one to replay it, else
// running on the primary) and its writes raise it. The client interceptors
// send the Session of a call's context ([SessionFrom]) with the call, and
// merge the position the server sends back into it.
//
// Where a call chain begins outside a gRPC handler (a command, a job),
// put the Session in the context with [WithSession], not with
// pgrouted.WithSession alone: pgrouted has no getter for the Session of a
// context, and the client interceptors send only the Session that
// WithSession or a server interceptor put there. (For the same reason, a
// handler behind package pgroutedhttp cannot yet hand its user's Session
// on to the services it calls: pgroutedhttp keeps it for pgrouted only.)
//
// # When the token is sent back
//
// A server sends the Session's token back only when the handler's writes
// moved it (a handler that only reads sends nothing), in the response's
// trailer: grpc-go writes the trailer after the handler returned, so it
// carries every write of the handler, whatever the handler did with the
// header, and also when the handler returned an error. A streaming
// handler's header carries it too, when the header goes out (its
// SendHeader, or its first message): a client reading a long stream learns
// the writes made before the stream's first message without waiting for
// its end. A write made after the header went out rides on the trailer
// only.
//
// The client merges a token into the call's Session: afterwards the
// Session needs both the writes it held and the server's (the later
// position of the two; one whose position was unknown stays unknown, as
// the safe choice). A unary call merges the trailer's token when it
// returns; a stream, the header's with its first message (or when the
// caller asks for the header) and the trailer's when it ends (RecvMsg
// returns an error, io.EOF included, or the response of a call that is not
// server-streaming). A stream abandoned before its end brings back the
// header's only. A Session restored from a token, or merged with one,
// counts its position for every relation: its reads of any table need it.
//
// The merge reads the Session's position and then replaces it: a write
// made with the same Session by another goroutine of the caller between
// the two is forgotten by the Session (its reads may then miss that write
// on a replica). Do not write with a Session while one of its calls is in
// flight.
//
// # One cluster
//
// A Session holds one position, of one database cluster. The services of
// a call chain that use different clusters cannot share one: a service
// that receives a token of another cluster ignores it on its first read
// (and counts it), and a client ignores a token sent back that names
// another cluster than its Session's position (and counts it). A Session
// without a position adopts any token sent back: give [WithSession] one
// that ignores foreign tokens (s.IgnoreForeign(nil), as the Sessions of
// the server interceptors and of [Options.Restore] do), or its next read
// fails with [pgrouted.ErrForeignSession] when the server used another
// cluster.
//
// # Tokens that cannot be trusted
//
// A token a server receives is handled as package pgroutedhttp handles a
// cookie: a malformed token, or (found by the first read) one of another
// cluster or one whose position the database never wrote, is ignored and
// counted ([Options.Rejected]); the call runs with a fresh Session, never
// an error. With [Options].Keys the tokens are signed (HMAC-SHA256, the
// first key signs, each verifies; see [pgrouted.Session.MarshalSigned]),
// and a token that is not signed, whose signature does not verify, or
// older than [Options].MaxAge ([DefaultTokenMaxAge] when 0) is ignored too:
//
//	opts := &pgroutedgrpc.Options{Keys: [][]byte{key}, MaxAge: time.Hour}
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(opts.UnaryServerInterceptor()))
//
// Every service of the call chain, client side included, needs the same
// Keys: the client signs what it sends and verifies what comes back.
//
// # Jobs and queues
//
// A message or a job is a call that is answered later: carry the
// producer's position in it, and restore one Session per message in the
// consumer. [Options.Token] marshals a Session (signed with Keys), and
// [Options.Restore] restores one (a fresh Session, counted, when the
// token cannot be trusted; never an error):
//
//	// Producer, after the write committed:
//	token, err := opts.Token(pgroutedgrpc.SessionFrom(ctx))
//	msg := Message{Order: id, Session: token}
//
//	// Consumer, for each message:
//	ctx := pgroutedgrpc.WithSession(ctx, opts.Restore(msg.Session))
//
// A message written in the transaction of the write it announces (an
// outbox) cannot carry that write's position, which is known after the
// commit: read such messages with global consistency
// (pgrouted.WithConsistency(ctx, pgrouted.ConsistencyGlobal)), which sees
// every write committed before the read began.
package pgroutedgrpc
