# ruff: noqa  (a hostile program for the sandbox, kept as written)
# a huge expression for the parser
# expect: memory
# timeout_s: 8
eval('1+' * 10**6 + '1')
