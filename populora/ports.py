"""Free loopback ports for servers started on this machine (local clusters, tests, benchmarks, the Compose test),
chosen from outside the kernel's ephemeral range."""

from __future__ import annotations

import random
import socket

# A port that bind(0) handed out and the caller released is soon the source port of some outgoing connection (to
# Postgres, to Redis, between the services), and the server that was to listen on it then fails with "address
# already in use". Ports the kernel never picks for outgoing connections cannot be taken that way.
EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"
_GIVEN: set[int] = set()


def listen_range(text: str | None = None) -> tuple[int, int]:
    """The larger stretch of unprivileged ports below or above the ephemeral range (`text`: that file's content)."""
    try:
        if text is None:
            with open(EPHEMERAL) as f:
                text = f.read()
        low, high = (int(x) for x in text.split()[:2])
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    below, above = (1024, low - 1), (high + 1, 65535)
    return max(below, above, key=lambda r: r[1] - r[0])


def free_port() -> int:
    """A loopback port nothing listens on now, outside the ephemeral range, not handed out before by this process
    (two servers started one after the other never get the same port, though the first has not bound it yet)."""
    low, high = listen_range()
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randint(low, high)
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise RuntimeError(f"no free loopback port between {low} and {high} (outside the ephemeral range, {EPHEMERAL}): "
                       "the 200 ports tried are all in use; stop the servers this machine no longer needs")
