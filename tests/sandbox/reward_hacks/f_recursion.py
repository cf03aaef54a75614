# ruff: noqa  (a reward-hacking attempt, kept as written)
# unbounded recursion
# kind: code_f_program
def f(x):
    return f(x + 1)
