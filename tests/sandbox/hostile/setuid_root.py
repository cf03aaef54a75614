# ruff: noqa  (a hostile program for the sandbox, kept as written)
# become root
# expect: error
import os
os.setuid(0)
