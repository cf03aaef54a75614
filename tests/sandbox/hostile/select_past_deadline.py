# ruff: noqa  (a hostile program for the sandbox, kept as written)
# block in select
# expect: timeout
# timeout_s: 1
import select
select.select([], [], [], 60)
