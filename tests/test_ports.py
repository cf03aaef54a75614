"""Free loopback ports (populora/ports.py): from outside the kernel's ephemeral range, never one in use or one
handed out before, and the one way the tree picks a port."""

from __future__ import annotations

import re
import socket

import pytest

from populora import ports
from tests.test_layout import ROOT, tracked


def test_ports_come_from_outside_the_ephemeral_range(monkeypatch):
    assert ports.listen_range("32768\t60999\n") == (1024, 32767)
    assert ports.listen_range("1024 20000") == (20001, 65535)
    assert ports.listen_range("garbage") == (1024, 32767)
    low, high = ports.listen_range()
    given = [ports.free_port() for _ in range(40)]
    assert len(set(given)) == 40 and all(low <= p <= high for p in given)
    # a port something listens on is never handed out
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        taken = busy.getsockname()[1]
        busy.listen()
        monkeypatch.setattr(ports, "listen_range", lambda: (taken, taken))
        with pytest.raises(RuntimeError, match="no free loopback port"):
            ports.free_port()


def test_the_tree_picks_ports_one_way():
    """A port bind(0) handed out and released can be taken by an outgoing connection before its server binds it
    (the race populora/ports.py avoids), so no other file defines a free_port or asks the kernel for port 0."""
    own = re.compile(r"def \w*free_port\b|\.bind\(\(\s*['\"][\d.]+['\"],\s*0\s*\)\)")
    elsewhere = [f for f in tracked("*.py") if f not in ("populora/ports.py", "tests/test_ports.py")
                 and own.search((ROOT / f).read_text())]
    assert not elsewhere, f"take ports from populora.ports.free_port instead: {elsewhere}"
