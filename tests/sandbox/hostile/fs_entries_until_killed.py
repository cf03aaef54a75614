# ruff: noqa  (a hostile program for the sandbox, kept as written)
# make filesystem entries as fast as it can until the wall clock ends it: its worker must still remove them all
# within the time the host waits, and the jobs queued behind it must not notice
# expect: timeout
# timeout_s: 2
import os
i = 0
while True:
    os.mkdir("d%d" % i)
    i += 1
