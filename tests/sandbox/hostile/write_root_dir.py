# ruff: noqa  (a hostile program for the sandbox, kept as written)
# write in /
# expect: error
open('/evil', 'w').write('x')
