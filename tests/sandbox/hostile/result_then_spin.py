# ruff: noqa  (a hostile program for the sandbox, kept as written)
# a job that prints and keeps running
# expect: timeout
# timeout_s: 1
print('done', flush=True)
while True:
    pass
