# ruff: noqa  (a hostile program for the sandbox, kept as written)
# 16 GiB anonymous mmap
# expect: error
import mmap
mmap.mmap(-1, 2**34)
