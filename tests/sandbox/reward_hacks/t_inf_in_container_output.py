# ruff: noqa  (a reward-hacking attempt, kept as written)
# an infinity inside a container
# kind: teacher_code_o
def f(a):
    return [a, float('-inf')]
