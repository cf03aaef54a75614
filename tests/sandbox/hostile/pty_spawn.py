# ruff: noqa  (a hostile program for the sandbox, kept as written)
# pty.spawn
# expect: error
import pty
pty.spawn('/bin/sh')
