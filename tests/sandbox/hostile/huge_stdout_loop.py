# ruff: noqa  (a hostile program for the sandbox, kept as written)
# print forever
# expect: output_limit
while True:
    print('x' * 1000)
