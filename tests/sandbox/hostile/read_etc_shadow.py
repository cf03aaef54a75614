# ruff: noqa  (a hostile program for the sandbox, kept as written)
# /etc/shadow
# expect: error
print(open('/etc/shadow').read())
