# ruff: noqa  (a hostile program for the sandbox, kept as written)
# DNS resolution
# expect: error
import socket
socket.getaddrinfo('example.com', 80)
