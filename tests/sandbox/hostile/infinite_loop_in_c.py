# ruff: noqa  (a hostile program for the sandbox, kept as written)
# busy loop inside C
# expect: timeout
# timeout_s: 1
sum(range(10**13))
