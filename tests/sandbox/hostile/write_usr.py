# ruff: noqa  (a hostile program for the sandbox, kept as written)
# write under /usr
# expect: error
open('/usr/evil', 'w').write('x')
