# ruff: noqa  (a hostile program for the sandbox, kept as written)
# socketpair
# expect: error
import socket
socket.socketpair()
