# ruff: noqa  (a hostile program for the sandbox, kept as written)
# Postgres's Unix socket
# expect: error
import socket
s = socket.socket(socket.AF_UNIX)
s.connect('/var/run/postgresql/.s.PGSQL.5432')
