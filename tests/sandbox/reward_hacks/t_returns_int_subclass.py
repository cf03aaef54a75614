# ruff: noqa  (a reward-hacking attempt, kept as written)
# a program whose output is an int subclass
# kind: teacher_code_o
I = type('I', (int,), {})

def f(a):
    return I(a)
