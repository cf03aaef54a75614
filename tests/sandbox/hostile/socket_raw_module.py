# ruff: noqa  (a hostile program for the sandbox, kept as written)
# the _socket C module
# expect: error
import _socket
_socket.socket()
