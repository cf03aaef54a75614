# ruff: noqa  (a hostile program for the sandbox, kept as written)
# a new session
# expect: error
import os
os.setsid()
