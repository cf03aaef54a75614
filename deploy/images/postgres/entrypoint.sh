#!/bin/sh
# Start PostgreSQL as the `postgres` user; on the first start (an empty $PGDATA) create the cluster with the
# superuser $POSTGRES_USER (password $POSTGRES_PASSWORD) and the database $POSTGRES_DB.
set -eu
bin=$(cat /etc/postgresql-bin)
export PATH="$bin:$PATH"
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }

if [ "${1:-}" != postgres ]; then
    exec "$@"
fi
shift
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "error: the database is not initialised and POSTGRES_PASSWORD is not set; set it (it becomes the" \
             "password of POSTGRES_USER=$user)" >&2
        exit 1
    fi
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    chown postgres "$pwfile"
    as_postgres initdb --pgdata="$PGDATA" --username="$user" --pwfile="$pwfile" --encoding=UTF8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$db" != postgres ]; then
        echo "CREATE DATABASE \"$db\" OWNER \"$user\";" \
            | as_postgres postgres --single -D "$PGDATA" postgres >/dev/null
    fi
    echo "created the cluster in $PGDATA (user $user, database $db)"
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" "$@"
