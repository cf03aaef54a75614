# ruff: noqa  (a hostile program for the sandbox, kept as written)
# one 10 MB print
# expect: output_limit
print('x' * 10**7)
