# ruff: noqa  (a hostile program for the sandbox, kept as written)
# a module the zygote preloaded is as it was for every job; the random generator is not left seeded by another job
# expect: ok
# phase: 2
import math, random, typing, collections
if hasattr(math, 'LEFTOVER') or hasattr(random, 'LEFTOVER') or math.gcd(12, 18) != 6:
    print('ESCAPED math/random patched')
if typing.List is int or collections.Counter is dict:
    print('ESCAPED typing/collections patched')
first = random.random()
random.seed(0)
if first == random.random():
    print('ESCAPED random left seeded')
