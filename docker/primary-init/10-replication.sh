#!/usr/bin/env bash
# Runs once, on the primary only, when the official postgres image initialises
# an empty data directory (files in /docker-entrypoint-initdb.d). At this point
# the entrypoint runs as the postgres user, with a temporary server listening
# on the Unix socket only; POSTGRES_USER and POSTGRES_DB are set.
#
# It creates the role the replicas use for pg_basebackup and streaming, and
# lets that role make replication connections from any address. The
# entrypoint has already added "host all all all scram-sha-256", but the
# database "all" in pg_hba.conf does not cover replication connections, so
# they need a line of their own.
#
# The entrypoint executes this file, or sources it if it lost its executable
# bit; so it never calls exit, and it sets shell options only when executed
# (when sourced, the entrypoint's own "set -Eeo pipefail" applies).
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -Eeuo pipefail
fi

: "${REPLICATION_USER:=replicator}"
if [ -z "${REPLICATION_PASSWORD:-}" ]; then
	echo "10-replication.sh: REPLICATION_PASSWORD must be set" >&2
	false
fi

# password_encryption is scram-sha-256 (set on the command line in
# docker-compose.yml), so the password is stored as a SCRAM verifier.
psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password \
	--username "$POSTGRES_USER" --dbname "${POSTGRES_DB:-$POSTGRES_USER}" \
	--set repl_user="$REPLICATION_USER" \
	--set repl_password="$REPLICATION_PASSWORD" <<-'EOSQL'
	SET password_encryption = 'scram-sha-256';
	CREATE ROLE :"repl_user" WITH REPLICATION LOGIN PASSWORD :'repl_password';
EOSQL

{
	printf '\n# Streaming replicas (added by docker/primary-init/10-replication.sh)\n'
	printf 'host replication %s all scram-sha-256\n' "$REPLICATION_USER"
} >> "$PGDATA/pg_hba.conf"
