# ruff: noqa  (a hostile program for the sandbox, kept as written)
# kill pid 1
# expect: error
import os
os.kill(1, 9)
