# ruff: noqa  (a hostile program for the sandbox, kept as written)
# one 10 GB allocation
# expect: memory
bytearray(10**10)
