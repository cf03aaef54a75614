# ruff: noqa  (a hostile program for the sandbox, kept as written)
# patch modules the zygote imported before forking (typing, math, random, collections), hoping the next job sees it
# expect: ok
# phase: 1
import math, random, typing, collections
math.gcd = lambda a, b: 1
math.LEFTOVER = True
random.seed(0)
random.LEFTOVER = True
typing.List = int
collections.Counter = dict
