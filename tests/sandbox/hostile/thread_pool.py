# ruff: noqa  (a hostile program for the sandbox, kept as written)
# ThreadPoolExecutor
# expect: error
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(4) as p:
    list(p.map(abs, range(10)))
