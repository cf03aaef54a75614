# ruff: noqa  (a hostile program for the sandbox, kept as written)
# kill the process group
# expect: error
import os
os.killpg(0, 9)
