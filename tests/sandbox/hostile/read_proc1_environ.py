# ruff: noqa  (a hostile program for the sandbox, kept as written)
# /proc/1/environ
# expect: error
print(open('/proc/1/environ').read())
