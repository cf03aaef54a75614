# ruff: noqa  (a hostile program for the sandbox, kept as written)
# read address 0
# expect: killed
import ctypes
ctypes.string_at(0)
