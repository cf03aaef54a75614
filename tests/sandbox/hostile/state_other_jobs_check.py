# ruff: noqa  (a hostile program for the sandbox, kept as written)
# no earlier job's directory (or what is left of it) is readable
# expect: ok
# phase: 2
import os
here = os.path.basename(os.getcwd())
for name in os.listdir("/tmp"):
    if name == here:
        continue
    try:
        if os.listdir(os.path.join("/tmp", name)):
            print("ESCAPED", name)
    except OSError:
        pass
