# ruff: noqa  (a hostile program for the sandbox, kept as written)
# no file survives the job
# expect: ok
# phase: 2
import os
if os.path.exists('leftover.txt') or os.listdir('.'):
    print('ESCAPED', os.listdir('.'))
