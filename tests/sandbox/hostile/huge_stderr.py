# ruff: noqa  (a hostile program for the sandbox, kept as written)
# 10 MB to stderr
# expect: output_limit
import sys
sys.stderr.write('e' * 10**7)
