#!/usr/bin/env bash
# Runs once, on the primary only, when the official postgres image initialises
# an empty data directory (after 10-replication.sh), as the postgres user with
# a temporary server on the Unix socket.
#
# It creates the application's role: LOGIN, not a superuser, no CREATEDB,
# no CREATEROLE, no REPLICATION. It owns the database, so it may create
# tables there (on PostgreSQL 15 and later the schema public belongs to the
# database's owner), and it is a member of pg_monitor, which lets pgrouted's
# probes read pg_stat_replication and pg_stat_wal_receiver (sync states,
# received timelines) as a superuser would.
#
# As 10-replication.sh, it never calls exit and sets shell options only when
# executed.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -Eeuo pipefail
fi

if [ -z "${APP_USER:-}" ] || [ -z "${APP_PASSWORD:-}" ]; then
	echo "20-app-role.sh: APP_USER and APP_PASSWORD must be set" >&2
	false
fi

psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password \
	--username "$POSTGRES_USER" --dbname "${POSTGRES_DB:-$POSTGRES_USER}" \
	--set app_user="$APP_USER" \
	--set app_password="$APP_PASSWORD" \
	--set app_db="${POSTGRES_DB:-$POSTGRES_USER}" <<-'EOSQL'
	SET password_encryption = 'scram-sha-256';
	CREATE ROLE :"app_user" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD :'app_password';
	ALTER DATABASE :"app_db" OWNER TO :"app_user";
	GRANT pg_monitor TO :"app_user";
EOSQL
