# ruff: noqa  (a hostile program for the sandbox, kept as written)
# TCP to Redis on 127.0.0.1:6379
# expect: error
import socket
s = socket.create_connection(('127.0.0.1', 6379), timeout=1)
s.sendall(b'PING\r\n')
print('ESCAPED', s.recv(10))
