# ruff: noqa  (a hostile program for the sandbox, kept as written)
# raw writes to fd 1
# expect: output_limit
import os
while True:
    os.write(1, b'x' * 65536)
