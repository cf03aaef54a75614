# ruff: noqa  (a hostile program for the sandbox, kept as written)
# string multiplication
# expect: memory
'a' * 10**10
