# ruff: noqa  (a hostile program for the sandbox, kept as written)
# kill(-1): every process of the uid
# expect: error
import os
os.kill(-1, 9)
