// Package topology builds, continuously, the driver's picture of the
// cluster from the hosts themselves.
//
// [New] starts one prober per host, each on its own small connection
// (application_name "pgrouted-probe", the data path's credentials and TLS),
// every [Options].Interval, with a timeout (a probe that must first open its
// connection has a connect budget of its own: see [Options].Timeout). A
// probe is one simple-protocol
// round trip reading pg_is_in_recovery(), a primary's WAL insert position and
// its pg_stat_replication sync states, a standby's replay and receive
// positions, the timeline and the system identifier. Its round-trip time feeds
// an EWMA (the first sample sets it, then 0.2·new + 0.8·old). Each prober runs
// in its own goroutine, so a slow host delays nobody else's probes.
//
// A single tracker goroutine owns the state: it applies probe results,
// decides which host is primary and publishes an immutable [Snapshot]
// through an atomic pointer, so that [Topology.Snapshot] on the routing hot
// path is one load, without lock or allocation.
//
// Primary tracking:
//   - a host claims to be primary when its last successful probe saw it out
//     of recovery; the claim lasts [Options].Lease after that probe was sent;
//   - exactly one claim: that host is the primary;
//   - several: the strictly highest timeline wins; a tie, or a timeline that
//     could not be read, means no primary (fail closed), and each such
//     observation is counted in [Snapshot].Conflicts;
//   - none (a failover in progress): no primary;
//   - the [Snapshot].Epoch increments each time the primary becomes a host
//     other than the previous one, and the primary is authoritative only
//     while [Snapshot.LeaseValid]: its last confirmation is younger than the
//     lease. A primary cut off from the driver thus stops being
//     authoritative by itself.
//
// A promoted standby is seen at its next probe; an old primary that comes
// back in recovery is a standby again at its next probe. [Topology.ProbeNow]
// asks for an immediate probe, for faster signals such as SQLSTATE 25006 on
// a connection that believed it was on the primary.
//
// Providers: with [Options].Provider, an authority beside the probes says
// which member leads and which serve: [Patroni] (GET /cluster on its REST
// endpoints, in order, the first that answers), [Manual] (driven from
// code), or an application's own [Provider]. [Authorize] holds the rules:
// only a running leader (or master) can be the primary, a standby_leader
// never; two running leaders are a conflict (no primary, counted in
// [Snapshot].Conflicts); the leader must be a known host (host compared
// ignoring case, port equal). A host is then the primary only when the
// provider authorises it and its own probe finds it out of recovery, both
// within the lease: a provider that stops answering lets the primary lapse
// at the end of the lease, and the probes never decide alone. Members that
// are not listed, not running or streaming, or tagged noloadbalance serve
// no reads ([HostState].NoReads). With [Options].Discover, members that no
// host matches become hosts (appended; indexes never move; at most
// [Options].DiscoverMax at once), and discovered hosts that leave the view
// are stopped and marked Removed. A discovered host is not trusted on the
// provider's word ([HostState].Untrusted): it serves nothing and cannot be
// the primary until its own probe has read the configured hosts' system
// identifier and seen it in recovery, before it was ever seen out of
// recovery. One that Discover returns [Host].Refused is never even
// connected to: it stays untrusted for that reason.
//
// [Topology.Subscribe] delivers [Event]s (host up or down, primary changed,
// lost, or in conflict) on a channel; the tracker never waits for a
// subscriber. [Topology.Close] stops every goroutine it started.
package topology
