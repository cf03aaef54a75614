# ruff: noqa  (a hostile program for the sandbox, kept as written)
# root's ssh keys
# expect: error
print(open('/root/.ssh/id_rsa').read())
