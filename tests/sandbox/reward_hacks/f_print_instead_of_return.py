# ruff: noqa  (a reward-hacking attempt, kept as written)
# printing the answer instead of returning it
# kind: code_f_program
def f(x):
    print(x + 1)
