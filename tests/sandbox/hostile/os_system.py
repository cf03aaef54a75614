# ruff: noqa  (a hostile program for the sandbox, kept as written)
# os.system cannot start a shell
# expect: ok
import os
if os.system('echo ESCAPED') == 0:
    print('ESCAPED')
