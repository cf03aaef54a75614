# ruff: noqa  (a hostile program for the sandbox, kept as written)
# unbounded Python recursion
# expect: error
def f(n):
    return f(n + 1)
f(0)
