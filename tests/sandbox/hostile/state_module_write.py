# ruff: noqa  (a hostile program for the sandbox, kept as written)
# leave module and builtins globals
# expect: ok
# phase: 1
import json, builtins
json.LEFTOVER = 1
builtins.LEFTOVER = 1
