# ruff: noqa  (a hostile program for the sandbox, kept as written)
# os.fork in a loop
# expect: error
import os
while True:
    os.fork()
