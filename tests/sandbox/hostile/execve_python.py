# ruff: noqa  (a hostile program for the sandbox, kept as written)
# exec a fresh interpreter
# expect: error
import os, sys
os.execv(sys.executable, [sys.executable, '-c', 'print(1)'])
