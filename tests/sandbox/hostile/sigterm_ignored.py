# ruff: noqa  (a hostile program for the sandbox, kept as written)
# ignore SIGTERM and spin
# expect: timeout
# timeout_s: 1
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
while True:
    pass
