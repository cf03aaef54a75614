# ruff: noqa  (a hostile program for the sandbox, kept as written)
# nothing of the host's environment is visible
# expect: ok
import os
extra = set(os.environ) - {'PYTHONHASHSEED', 'PATH', 'HOME', 'LANG', 'PWD'}
if extra:
    print('ESCAPED', sorted(extra))
