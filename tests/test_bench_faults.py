"""bench/faults.py: the schedule from its seed, the proxy that cuts connections, and the storm itself at its smallest
(eight faults of every kind on a distributed run of the tiny preset)."""

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bench.fault_proxy import FaultProxy
from bench.faults import KINDS, schedule

ROOT = Path(__file__).resolve().parents[1]


def test_a_seed_gives_its_schedule_again_and_kinds_can_be_chosen():
    assert schedule(7, 30) == schedule(7, 30)
    assert schedule(7, 30) != schedule(8, 30)
    drawn = schedule(7, 200)
    assert {f["kind"] for f in drawn} == set(KINDS)
    assert all(0.5 <= f["pause_s"] <= 4.0 for f in drawn)
    assert all(2.0 <= f["away_s"] <= 6.0 for f in drawn if f["kind"] == "remove_replica")
    assert {f["kind"] for f in schedule(7, 50, ["cut_connection", "kill_worker"])} == {"cut_connection", "kill_worker"}
    with pytest.raises(ValueError, match="unknown fault kinds"):
        schedule(7, 3, ["kill_everything"])


def test_the_command_refuses_an_unknown_kind():
    done = subprocess.run([sys.executable, "-m", "bench.faults", "--kinds", "kill_replica,unplug"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown --kinds ['unplug']" in done.stderr


def _echo_server() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return

            def echo(c=conn):
                try:
                    while data := c.recv(4096):
                        c.sendall(data)
                except OSError:
                    pass

            threading.Thread(target=echo, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def test_the_proxy_forwards_and_cuts_the_connections_it_holds():
    server, port = _echo_server()
    proxy = FaultProxy(port)
    try:
        a = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        a.sendall(b"hello")
        assert a.recv(16) == b"hello"
        assert proxy.open() == 1
        assert proxy.cut() == 1 and proxy.cuts == 1
        with pytest.raises(OSError):  # reset: the call in flight fails, no clean end of stream
            a.sendall(b"x" * 65536)
            assert a.recv(16) == b""
            raise ConnectionResetError("closed")
        b = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)  # a new connection goes through
        b.sendall(b"again")
        assert b.recv(16) == b"again"
        server.close()
        b.close()
    finally:
        proxy.close()


def test_the_proxy_resets_a_connection_when_nothing_listens_behind_it():
    from populora.ports import free_port

    proxy = FaultProxy(free_port())  # nothing listens there
    try:
        with pytest.raises(OSError):  # refused or reset, as without the proxy
            c = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            c.sendall(b"x")
            if c.recv(16) == b"":
                raise ConnectionResetError("closed")
    finally:
        proxy.close()


@pytest.mark.slow
def test_a_storm_of_eight_faults_loses_nothing():
    """Eight faults on three overlapped steps (an evolution at step 2, its children playing step 3) with two trainer
    and two inference replicas: the run ends with the one-process run's records, weights and optimizer states,
    nothing lost or applied twice."""
    from tests.e2e.servers import need_binaries

    need_binaries()
    done = subprocess.run([sys.executable, "-m", "bench.faults", "--json", "--faults", "8", "--seed", "3",
                           "--steps", "3"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["faults"] == 8 and out["recovered"] == 8 and out["steps_done"] == 3, out
    assert out["same_as_one_process"], out["differences"]
    assert out["lost_updates"] == 0 and out["duplicated_updates"] == 0
    assert len(out["schedule"]) == 8 and all("recover_s" in h for h in out["schedule"])
    assert done.returncode == 0, done.stderr[-3000:]
