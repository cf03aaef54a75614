# ruff: noqa  (a hostile program for the sandbox, kept as written)
# SIGALRM from alarm()
# expect: killed
# timeout_s: 2
import signal
signal.alarm(1)
while True:
    pass
