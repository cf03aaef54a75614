# ruff: noqa  (a hostile program for the sandbox, kept as written)
# pipes until it fails
# expect: error
ps = [__import__('os').pipe() for _ in range(10000)]
