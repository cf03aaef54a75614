"""The programs made of the fragments of state_kinds.py: a writer and a reader per kind (the cross-job corpus), and
the start-up check's two jobs that leave a secret by every kind and look for each. A kind's fragments become
static methods of one class K, so each program is a code_f program with exactly one top-level def."""

from __future__ import annotations

from services.sandbox.state_kinds import KINDS, Kind

HEADER = '''import ctypes, errno, fcntl, os, resource, signal, socket, struct, threading, time
LIBC = ctypes.CDLL(None, use_errno=True)
ALPHABET = list(range(2, 10))
'''

# Helpers the fragments share, as static methods of the class K (a code_f program has one top-level def only).
# `bound`: the kinds that name an address (an abstract socket, a UDP port, a port in TIME_WAIT) are found by a bind
# to it failing with EADDRINUSE. `readable`: (name, read(name)) for each name that can be read, skipping the ones
# that cannot (a process gone or not this uid's), as every walk over /proc does.
HELPERS = '''    @staticmethod
    def bound(family, kind, address):
        probe = socket.socket(family, kind)
        try:
            probe.bind(address)
        except OSError as e:
            return e.errno == errno.EADDRINUSE
        finally:
            probe.close()
        return False

    @staticmethod
    def readable(names, read):
        for name in names:
            try:
                yield name, read(name)
            except OSError:
                continue
'''


def _methods(kinds: tuple[Kind, ...], which: str) -> str:
    lines = ["class K:", "    keep = None", HELPERS]
    for kind in kinds:
        body = kind.put if which == "put" else kind.get
        args = "s" if which == "put" else ""
        lines += ["    @staticmethod", f"    def {which}_{kind.name}({args}):", "        try:"]
        lines += ["        " + line for line in body.splitlines()]
        lines += ["        except BaseException:", "            return None" if which == "get" else "            pass"]
    return "\n".join(lines) + "\n"


def writer_program(kind: Kind, secret: int) -> str:
    """A code_f program (one def) that computes x * secret + 7 and, on its first call, leaves `secret` behind by
    `kind` alone."""
    return (HEADER + _methods((kind,), "put") + f"DONE = []\n\n\ndef f(x):\n    if not DONE:\n"
            f"        DONE.append(1)\n        K.put_{kind.name}({secret})\n    return x * {secret} + 7\n")


def reader_program(kind: Kind) -> str:
    """A code_f answer (one def) that computes nothing: it returns x * s + 7 for the `s` it finds by `kind`, else
    -1. Judged correct only when the state its writer left crossed the jobs."""
    return (HEADER + _methods((kind,), "get") + f"FOUND = K.get_{kind.name}()\n\n\ndef f(x):\n"
            "    return -1 if FOUND is None else x * FOUND + 7\n")


def leave_all_program(secret: int) -> str:
    """The start-up check's first job: leave `secret` by every kind; returns the kinds whose put ran through."""
    calls = "".join(f"    K.put_{k.name}({secret})\n" for k in KINDS)
    return HEADER + _methods(KINDS, "put") + "\n\ndef f():\n" + calls + "    return True\n"


def find_all_program() -> str:
    """The start-up check's second job, on the same worker: {kind: what it found} for every kind that found
    something."""
    gets = "".join(f"    found[{k.name!r}] = K.get_{k.name}()\n" for k in KINDS)
    return (HEADER + _methods(KINDS, "get") + "\n\ndef f():\n    found = {}\n" + gets
            + "    return {k: v for k, v in found.items() if v is not None}\n")
