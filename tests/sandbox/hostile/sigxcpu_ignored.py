# ruff: noqa  (a hostile program for the sandbox, kept as written)
# ignore SIGXCPU and spin
# expect: timeout
# timeout_s: 1
import signal
signal.signal(signal.SIGXCPU, signal.SIG_IGN)
while True:
    pass
