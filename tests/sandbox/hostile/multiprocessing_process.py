# ruff: noqa  (a hostile program for the sandbox, kept as written)
# multiprocessing.Process
# expect: error
import multiprocessing as mp
q = mp.Process(target=print)
q.start()
q.join()
