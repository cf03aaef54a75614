# ruff: noqa  (a hostile program for the sandbox, kept as written)
# one file past the size limit
# expect: error
open('big', 'wb').write(b'0' * (100 * 2**20))
