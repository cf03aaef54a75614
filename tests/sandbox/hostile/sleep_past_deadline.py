# ruff: noqa  (a hostile program for the sandbox, kept as written)
# sleep
# expect: timeout
# timeout_s: 1
import time
time.sleep(30)
