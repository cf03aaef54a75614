# ruff: noqa  (a hostile program for the sandbox, kept as written)
# subprocess.run
# expect: error
import subprocess
subprocess.run(['id'])
