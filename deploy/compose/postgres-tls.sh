#!/bin/sh
# The entrypoint of the compose files' postgres: Postgres reads its TLS key only from a file owned by its own user
# (or root) that no one else may read, and a Compose secret is the host's file as it is. So the key is copied to
# such a file first, then the image's own entrypoint starts Postgres with the command's TLS settings.
set -eu
key=/run/secrets/tls/postgres-key.pem
[ -r "$key" ] || { echo "error: $key is missing: the secret tls_postgres_key (populora certs --dir DIR)" >&2; exit 1; }
install -d -o postgres -g postgres -m 700 /run/postgres-tls
install -o postgres -g postgres -m 600 "$key" /run/postgres-tls/server.key
# the public image's entrypoint, else deploy/images/postgres's
for entrypoint in docker-entrypoint.sh postgres-entrypoint; do
    if command -v "$entrypoint" >/dev/null; then exec "$entrypoint" "$@"; fi
done
echo "error: the image has no docker-entrypoint.sh nor postgres-entrypoint" >&2
exit 1
