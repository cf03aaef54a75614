# ruff: noqa  (a hostile program for the sandbox, kept as written)
# no planted module survives
# expect: ok
# phase: 2
import sys
if 'planted' in sys.modules:
    print('ESCAPED')
