#!/usr/bin/env bash
# Entrypoint of the replica services in docker-compose.yml (official
# postgres:16 image, started as root).
#
# If PGDATA holds no cluster yet, wait for the primary and clone it with
# pg_basebackup -R, which also writes standby.signal and primary_conninfo
# (with the replication password) into postgresql.auto.conf. Then hand over to
# the image's docker-entrypoint.sh: it finds PG_VERSION, skips initdb, fixes
# ownership, drops to the postgres user with gosu and starts postgres, which
# comes up as a hot standby because of standby.signal.
set -Eeuo pipefail

: "${PGDATA:=/var/lib/postgresql/data}"
: "${PRIMARY_HOST:=primary}"
: "${PRIMARY_PORT:=5432}"
: "${REPLICATION_USER:=replicator}"
: "${REPLICA_NAME:=${HOSTNAME:-replica}}"

log() { printf 'replica-entrypoint: %s\n' "$*" >&2; }

# Run a command as the postgres user (we are normally root here).
as_postgres() {
	if [ "$(id -u)" = 0 ]; then
		gosu postgres "$@"
	else
		"$@"
	fi
}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "${REPLICATION_PASSWORD:-}" ]; then
		log "REPLICATION_PASSWORD must be set"
		exit 1
	fi

	mkdir -p "$PGDATA"
	if [ -n "$(ls -A "$PGDATA")" ]; then
		log "$PGDATA is not empty but holds no cluster (no PG_VERSION);"
		log "refusing to overwrite it. Remove the volume (docker compose down -v) and retry."
		exit 1
	fi
	if [ "$(id -u)" = 0 ]; then
		chown postgres:postgres "$PGDATA"
	fi
	chmod 0700 "$PGDATA"

	log "waiting for the primary at $PRIMARY_HOST:$PRIMARY_PORT"
	tries=0
	until pg_isready -q -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -U "$REPLICATION_USER" -d postgres; do
		tries=$((tries + 1))
		if [ "$tries" -ge 120 ]; then
			log "the primary did not become ready in time"
			exit 1
		fi
		sleep 1
	done

	log "cloning the primary into $PGDATA with pg_basebackup"
	# PGPASSWORD and PGAPPNAME end up in primary_conninfo, so the standby can
	# reconnect after a restart and shows up as $REPLICA_NAME in
	# pg_stat_replication on the primary. On failure pg_basebackup removes
	# what it wrote, so the next start tries again from an empty directory.
	PGPASSWORD="$REPLICATION_PASSWORD" PGAPPNAME="$REPLICA_NAME" \
		as_postgres pg_basebackup \
		--pgdata="$PGDATA" \
		--host="$PRIMARY_HOST" --port="$PRIMARY_PORT" \
		--username="$REPLICATION_USER" --no-password \
		--wal-method=stream --checkpoint=fast \
		--write-recovery-conf
	chmod 0700 "$PGDATA"
	log "base backup done; starting as a hot standby"
fi

exec docker-entrypoint.sh "$@"
