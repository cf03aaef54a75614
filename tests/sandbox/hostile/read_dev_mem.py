# ruff: noqa  (a hostile program for the sandbox, kept as written)
# /dev/mem
# expect: error
open('/dev/mem', 'rb').read(1)
