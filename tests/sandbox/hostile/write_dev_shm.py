# ruff: noqa  (a hostile program for the sandbox, kept as written)
# write in /dev/shm
# expect: error
open('/dev/shm/evil', 'w').write('x')
