# ruff: noqa  (a hostile program for the sandbox, kept as written)
# HTTP with urllib
# expect: error
import urllib.request
urllib.request.urlopen('http://127.0.0.1:8081/healthz', timeout=1)
