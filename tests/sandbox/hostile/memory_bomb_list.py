# ruff: noqa  (a hostile program for the sandbox, kept as written)
# grow a list of 1 MB strings
# expect: memory
x = []
while True:
    x.append(' ' * 10**6)
