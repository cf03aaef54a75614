# ruff: noqa  (a hostile program for the sandbox, kept as written)
# posix_spawn
# expect: error
import os
os.posix_spawn('/bin/true', ['true'], {})
