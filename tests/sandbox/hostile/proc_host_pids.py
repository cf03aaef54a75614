# ruff: noqa  (a hostile program for the sandbox, kept as written)
# the pid namespace hides host processes
# expect: ok
import os
pids = [p for p in os.listdir('/proc') if p.isdigit()]
if len(pids) > 5:
    print('ESCAPED', len(pids))
