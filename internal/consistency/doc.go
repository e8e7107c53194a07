// Package consistency is pgrouted's read-your-writes state and the rules
// that move it: nothing outside this package changes it.
//
// A [Mark] is the position of the last writes of a Session, or of a whole
// Connector, published as an immutable [State]. Its transitions are named
// methods, each the one place its rule lives:
//
//   - [Mark.Wrote]: a write committed at a known position (or at an
//     unknown one: its answer was lost);
//   - [Mark.Saw]: a read saw at most a position (causal consistency: an
//     upper bound of what its snapshot held, read after it), which the
//     next reads of its scope need as they need its writes;
//   - [Mark.WroteDeferred]: a write committed whose position is left to be
//     read when a read needs it (a deferred position);
//   - [Mark.ResolveDeferred]: that position, read for a read;
//   - [Mark.Settle]: what a read learns from the current primary's last
//     probe: a failover since the write (a timeline change: the write
//     survived, was lost, or cannot be told), an unknown or deferred
//     position that a probe sent after it settles;
//   - [Mark.DropForeign]: a token of another cluster forgotten;
//   - [Mark.DropForged]: a token whose position the primary never wrote
//     forgotten;
//   - [Mark.Restore]: the state a token carried from another process, with
//     what vouches for it ([Origin]).
//
// A Session's token and its signed form ([AppendToken], [ParseToken],
// [Sign], [Verify]) are here too.
//
// What a read plans with, but never commits, are copies: [State.WithIndex]
// (the primary's position read for a global read), [State.AtLeast].
//
// Beside the state: the read index ([ReadIndex]: one read of the primary's
// position serves every read that began before it), the record of what
// reads of deferred positions served ([DeferredUse]), each replica's
// record of how soon after a write it holds it ([CatchUp]), the clock
// they share ([Now]), and a statement's [Intent]: what the context asked
// for, resolved once per statement.
//
// The package knows nothing of pgx, hosts or topology snapshots: the
// caller hands it a [Primary], what the last probe of the current primary
// showed, and acts on the [Effect] a transition reports (a lost write to
// count and log).
package consistency
