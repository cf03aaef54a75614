# ruff: noqa  (a hostile program for the sandbox, kept as written)
# busy loop
# expect: timeout
# timeout_s: 1
while True:
    pass
