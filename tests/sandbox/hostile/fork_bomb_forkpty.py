# ruff: noqa  (a hostile program for the sandbox, kept as written)
# forkpty
# expect: error
import os
os.forkpty()
