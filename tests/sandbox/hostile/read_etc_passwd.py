# ruff: noqa  (a hostile program for the sandbox, kept as written)
# /etc/passwd (not mounted)
# expect: error
print(open('/etc/passwd').read())
