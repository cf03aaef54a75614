# ruff: noqa  (a hostile program for the sandbox, kept as written)
# write a sysctl
# expect: error
open('/proc/sys/kernel/hostname', 'w').write('evil')
