# ruff: noqa  (a hostile program for the sandbox, kept as written)
# 6,000 subdirectories of one directory, each with a file, in a fraction of a second: removing them by listing the
# parent again after each subdirectory took minutes, and every job queued behind it on its worker failed
# expect: output_limit
# timeout_s: 20
import os
for i in range(6000):
    os.mkdir("d%d" % i)
    open("d%d/f" % i, "w").close()
