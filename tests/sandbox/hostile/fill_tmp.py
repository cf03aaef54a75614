# ruff: noqa  (a hostile program for the sandbox, kept as written)
# fill the private tmpfs
# expect: error
for i in range(1000):
    open(f'f{i}', 'wb').write(b'0' * 2**20)
