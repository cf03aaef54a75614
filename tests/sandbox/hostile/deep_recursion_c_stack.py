# ruff: noqa  (a hostile program for the sandbox, kept as written)
# C-stack recursion (through map) past a raised recursion limit
# expect: killed
import sys
sys.setrecursionlimit(10**7)
def f(x):
    return list(map(f, [x]))
f(0)
