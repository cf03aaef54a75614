# ruff: noqa  (a hostile program for the sandbox, kept as written)
# no global survives the job
# expect: ok
# phase: 2
import json, builtins
if hasattr(json, 'LEFTOVER') or hasattr(builtins, 'LEFTOVER'):
    print('ESCAPED')
