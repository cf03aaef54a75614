# ruff: noqa  (a hostile program for the sandbox, kept as written)
# open files until it fails
# expect: error
fs = [open('/dev/null') for _ in range(10000)]
