#!/bin/sh
# Run redis-server as `redis`; without a configuration file (the first argument after redis-server is an option),
# listen on every interface with protected mode off, as the public image does.
set -eu
if [ "${1:-}" = redis-server ]; then
    shift
    case "${1:-}" in
        ""|-*) set -- redis-server --bind '* -::*' --protected-mode no "$@" ;;
        *) set -- redis-server "$@" ;;
    esac
    chown redis:redis /data
    exec setpriv --reuid=redis --regid=redis --init-groups "$@"
fi
exec "$@"
