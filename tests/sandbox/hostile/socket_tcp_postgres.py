# ruff: noqa  (a hostile program for the sandbox, kept as written)
# TCP to Postgres on 127.0.0.1:5432
# expect: error
import socket
s = socket.create_connection(('127.0.0.1', 5432), timeout=1)
print('ESCAPED')
