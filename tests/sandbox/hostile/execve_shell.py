# ruff: noqa  (a hostile program for the sandbox, kept as written)
# execv /bin/sh
# expect: error
import os
os.execv('/bin/sh', ['sh', '-c', 'echo ESCAPED'])
