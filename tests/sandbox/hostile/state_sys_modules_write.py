# ruff: noqa  (a hostile program for the sandbox, kept as written)
# plant a fake module
# expect: ok
# phase: 1
import sys, types
sys.modules['planted'] = types.ModuleType('planted')
