# ruff: noqa  (a hostile program for the sandbox, kept as written)
# threading.Thread
# expect: error
import threading
threading.Thread(target=print).start()
