# ruff: noqa  (a hostile program for the sandbox, kept as written)
# 10**10**10
# expect: timeout
# timeout_s: 1
10**10**10
