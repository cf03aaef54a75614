# ruff: noqa  (a hostile program for the sandbox, kept as written)
# kill the zygote
# expect: error
import os
os.kill(os.getppid(), 9)
