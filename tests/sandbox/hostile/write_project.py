# ruff: noqa  (a hostile program for the sandbox, kept as written)
# write into the project
# expect: error
open('/work/main/evil', 'w').write('x')
