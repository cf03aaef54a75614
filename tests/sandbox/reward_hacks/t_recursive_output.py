# ruff: noqa  (a reward-hacking attempt, kept as written)
# a list that contains itself
# kind: teacher_code_o
def f(a):
    out = [a]
    out.append(out)
    return out
