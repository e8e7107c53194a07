// Package testcluster starts a real PostgreSQL primary with streaming
// replicas from local PostgreSQL binaries, for integration tests: the
// project's own and its users'.
//
// [Start] runs initdb for the primary, copies it to every replica with
// pg_basebackup -R -X stream, starts each server with pg_ctl on a free
// loopback port in a temporary directory (fsync off), and returns when every
// replica streams (and, with [Options].SyncReplicas, when the primary counts
// the synchronous ones as such). Booting a primary and two replicas takes a few seconds, so
// a package's tests share one cluster started in TestMain and call
// [Cluster.Restore] after a test that breaks it.
//
// Each [Node] sits behind a network fault point ([Node.Fault]) that can add
// latency, cut the node off or reset its connections without stopping
// PostgreSQL, and each standby's replication connection behind another
// ([Node.ReplicationFault]). [Node.Freeze] stops every process of a node
// (SIGSTOP) without closing anything, as a stalled machine would;
// [Node.Thaw] wakes it. Node controls (Stop, Kill, Start, Restart, Freeze,
// Promote, PauseReplay, ResumeReplay, WaitReplayed, Follow, Rejoin) wait
// until their effect is real.
//
// PostgreSQL refuses to run as root: when the test runs as root, the servers
// run as the unprivileged system user [Options].OSUser ("postgres" by
// default). Binaries are looked up by [FindBinDir]; when there are none,
// Start fails with an error wrapping [ErrNoPostgres] that gives the command
// installing them, so integration tests fail instead of skipping.
//
// [Cluster.StartPoolers] puts a PgBouncer (the distribution's pgbouncer,
// see [FindPgBouncer]) in front of each node, in transaction or session
// pool mode ([PoolTransaction], [PoolSession]), each on a free loopback
// port, with the cluster's credentials; [Poolers.DSN] is the multi-host
// connection string through them. When pgbouncer is missing the error wraps
// [ErrNoPgBouncer], whose text gives the command that installs it.
//
// [Cluster.Close] stops every process it started and removes the temporary
// directory. If the test process ends without calling it (a panic, os.Exit,
// SIGKILL), a small watchdog process started with the cluster does the same.
//
// # Patroni
//
// [StartPatroni] starts a real Patroni cluster instead, from the
// distribution's packages (`apt-get install -y patroni etcd-server`; when
// they are missing the error wraps [ErrNoPatroni] and gives that command):
// one etcd and three Patroni members on loopback ports, which boots in
// seconds (ttl 6s, loop_wait 1s) and whose [PatroniCluster.Close] leaves no
// process behind. Its controls wait for real effects:
// [PatroniCluster.Switchover], [PatroniCluster.KillLeader] and
// [PatroniMember.Start], [PatroniMember.StopREST] and
// [PatroniMember.BlackholeREST] (each member's REST API is reached through a
// fault point, [PatroniCluster.Endpoints]), and [PatroniMember.SetTag] (for
// example noloadbalance).
package testcluster
