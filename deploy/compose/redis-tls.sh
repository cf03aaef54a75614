#!/bin/sh
# The entrypoint of the compose files' redis: its TLS key and ACL file (the users and their password hashes) are
# copied from their Compose secrets (the host's files as they are) to files only the redis user reads, then the
# image's own entrypoint starts redis-server as that user.
set -eu
for f in /run/secrets/tls/redis-key.pem /run/secrets/redis-users.acl; do
    [ -r "$f" ] || { echo "error: $f is missing (docs/operations.md: Postgres and Redis over TLS)" >&2; exit 1; }
done
install -d -o redis -g redis -m 700 /run/redis-tls
install -o redis -g redis -m 600 /run/secrets/tls/redis-key.pem /run/secrets/redis-users.acl /run/redis-tls/
# the public image's entrypoint, else deploy/images/redis's
for entrypoint in docker-entrypoint.sh redis-entrypoint; do
    if command -v "$entrypoint" >/dev/null; then exec "$entrypoint" "$@"; fi
done
echo "error: the image has no docker-entrypoint.sh nor redis-entrypoint" >&2
exit 1
