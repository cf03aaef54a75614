# ruff: noqa  (a hostile program for the sandbox, kept as written)
# UDP datagram
# expect: error
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(b'x', ('8.8.8.8', 53))
