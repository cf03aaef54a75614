# ruff: noqa  (a hostile program for the sandbox, kept as written)
# write in /tmp outside the job dir
# expect: error
open('/tmp/evil', 'w').write('x')
