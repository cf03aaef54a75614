# ruff: noqa  (a hostile program for the sandbox, kept as written)
# leave a directory tree deeper than PATH_MAX, which a plain rmtree cannot remove
# expect: ok
# phase: 1
import os
for _ in range(2500):
    os.mkdir("d")
    os.chdir("d")
open("secret.txt", "w").write("left behind")
