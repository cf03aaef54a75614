# ruff: noqa  (a hostile program for the sandbox, kept as written)
# raise the address-space limit
# expect: error
import resource
resource.setrlimit(resource.RLIMIT_AS, (-1, -1))
