# ruff: noqa  (a hostile program for the sandbox, kept as written)
# chroot
# expect: error
import os
os.chroot('.')
