# ruff: noqa  (a hostile program for the sandbox, kept as written)
# multiprocessing.Pool
# expect: error
import multiprocessing as mp
with mp.Pool(2) as p:
    p.map(abs, range(4))
