# ruff: noqa  (a hostile program for the sandbox, kept as written)
# /proc/1/mem
# expect: error
open('/proc/1/mem', 'rb').read(16)
