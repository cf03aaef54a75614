# ruff: noqa  (a hostile program for the sandbox, kept as written)
# leave a file in the job dir
# expect: ok
# phase: 1
open('leftover.txt', 'w').write('state')
