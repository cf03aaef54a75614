"""Rotation without a stop: a server and a client that keep running move from one CA to another (both CAs trusted,
then new certificates, then the old CA dropped) while calls go on, every call succeeding and every write kept; at
the end a certificate of the old CA is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from populora import certs, rpc
from populora.config import load_config
from populora.pb import league_pb2
from services.league.service import LeagueService
from tests.security.conftest import files


def _install(live: Path, source: Path, name: str) -> None:
    certs.write_private(certs.key_file(live, name), certs.key_file(source, name).read_bytes())
    certs.write_public(certs.cert_file(live, name), certs.cert_file(source, name).read_bytes())


def _bundle(live: Path, *sources: Path) -> None:
    certs.write_public(certs.ca_file(live), b"".join(certs.ca_file(s).read_bytes() for s in sources))


def test_both_sides_move_to_a_new_ca_while_calls_go_on(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    for folder in (old, new):
        certs.write_certs(folder, ["league", "coordinator"], days=1)
    server_dir, client_dir = tmp_path / "server", tmp_path / "client"
    for live, name in ((server_dir, "league"), (client_dir, "coordinator")):
        live.mkdir()
        _bundle(live, old)
        _install(live, old, name)
    league = LeagueService.from_config(load_config(env=False, overrides=[f"run.output_dir={tmp_path}"]))
    server, port, _ = rpc.make_server([league], 0, "127.0.0.1", "", tls=files(server_dir, "league"))
    address = f"127.0.0.1:{port}"
    client = rpc.connect("league", address, timeout=10, retries=0, tls=files(client_dir, "coordinator"))
    runs = []

    def write() -> None:
        runs.append(f"r{len(runs)}")
        assert client.CreateRun(league_pb2.CreateRunRequest(run_id=runs[-1], mode="population")).created

    try:
        write()
        for live in (server_dir, client_dir):  # 1. every side trusts both CAs
            _bundle(live, old, new)
            write()
        _install(server_dir, new, "league")  # 2. new certificates, one side after the other
        write()
        _install(client_dir, new, "coordinator")
        write()
        for live in (server_dir, client_dir):  # 3. the old CA goes
            _bundle(live, new)
            write()
        stale = rpc.connect("league", address, timeout=10, retries=0, tls=files(old, "coordinator"))
        with pytest.raises(rpc.ServiceError):
            stale.CreateRun(league_pb2.CreateRunRequest(run_id="stale", mode="population"))
        stale.close()
        assert [r for r in runs if league.db.run_exists(r)] == runs == [f"r{i}" for i in range(7)]
        assert not league.db.run_exists("stale")
    finally:
        client.close()
        server.stop(None)
        league.close()


def test_a_client_keeps_its_channel_while_a_pair_is_half_replaced(tmp_path):
    certs.write_certs(tmp_path, ["league", "coordinator"], days=1)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    key, cert = certs.issue(*certs.load_ca(tmp_path), "coordinator", days=1)
    live = files(tmp_path, "coordinator")
    league = LeagueService.from_config(load_config(env=False, overrides=[f"run.output_dir={tmp_path}"]))
    server, port, _ = rpc.make_server([league], 0, "127.0.0.1", "", tls=files(tmp_path, "league"))
    client = rpc.connect("league", f"127.0.0.1:{port}", timeout=10, retries=0, tls=live)
    try:
        assert client.CreateRun(league_pb2.CreateRunRequest(run_id="a", mode="population")).created
        certs.write_private(live.key, certs.key_pem(key))  # the key replaced, its certificate not yet
        assert not live.pair_ok()
        assert client.CreateRun(league_pb2.CreateRunRequest(run_id="b", mode="population")).created
        certs.write_public(live.cert, certs.cert_pem(cert))
        assert live.pair_ok()
        assert client.CreateRun(league_pb2.CreateRunRequest(run_id="c", mode="population")).created
        assert len(client._old) == 1  # one new channel, opened once the pair was whole
    finally:
        client.close()
        server.stop(None)
        league.close()
