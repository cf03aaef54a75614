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


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    tmp.replace(path)


def test_a_scoped_token_is_replaced_while_calls_go_on(tmp_path, caplog):
    """The servers' verifiers file gives the coordinator [old, new] during the overlap (`populora token new
    --keep-old`); the client's token file moves to the new one; the old one is then dropped (`populora token
    drop-old`) and refused, all without a restart. The server's file never holds a token."""
    import grpc

    from populora.access import Access
    from populora.tokenfiles import VERIFIERS_FILE, drop_old, new_tokens, token_file

    secrets = tmp_path / "secrets"
    new_tokens(secrets, ["coordinator", "dashboard"])
    verifiers, mine = secrets / VERIFIERS_FILE, token_file(secrets, "coordinator")
    old_token = mine.read_text().strip()
    league = LeagueService.from_config(load_config(env=False, overrides=[f"run.output_dir={tmp_path}"]))
    server, port, _ = rpc.make_server([league], 0, "127.0.0.1", access=Access(tokens_file=str(verifiers)))
    address = f"127.0.0.1:{port}"
    client = rpc.connect("league", address, timeout=10, retries=0, token_file=str(mine))
    stale = rpc.connect("league", address, old_token, timeout=10, retries=0)

    def create(who, run_id: str) -> bool:
        return who.CreateRun(league_pb2.CreateRunRequest(run_id=run_id, mode="population")).created

    try:
        assert create(client, "r0")
        new_tokens(secrets, ["coordinator"], keep_old=True)  # the verifiers first, then the client's new token
        new_token = mine.read_text().strip()
        assert new_token != old_token and old_token not in verifiers.read_text()
        assert new_token not in verifiers.read_text()
        assert create(stale, "r1")  # the overlap: both are taken
        assert create(client, "r2")
        drop_old(secrets, ["coordinator"])
        assert create(client, "r3")
        with pytest.raises(rpc.ServiceError) as e:
            create(stale, "r4")
        assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
        _write(verifiers, "coordinator: [unclosed\n")  # a file that does not parse keeps the verifiers read before
        assert create(client, "r5")
        assert "services.tokens_path" in caplog.text
        _write(verifiers, f"coordinator: {new_token}\n")  # a token in clear is no verifier: refused, not taken
        assert create(client, "r6")
        assert "not a token verifier" in caplog.text and new_token not in caplog.text
        assert [r for r in ("r0", "r1", "r2", "r3", "r4", "r5", "r6") if league.db.run_exists(r)] == \
            ["r0", "r1", "r2", "r3", "r5", "r6"]
    finally:
        client.close()
        stale.close()
        server.stop(None)
        league.close()


def test_a_tokens_file_that_cannot_be_used_stops_the_server_from_starting(tmp_path):
    from populora.access import Access
    from populora.config import ConfigError

    with pytest.raises(ConfigError, match="services.tokens_path.*nowhere"):
        Access(tokens_file=str(tmp_path / "nowhere.yaml"))
    (tmp_path / "bad.yaml").write_text("mallory: x\n")
    with pytest.raises(ConfigError, match="mallory"):
        Access(tokens_file=str(tmp_path / "bad.yaml"))
    (tmp_path / "clear.yaml").write_text("coordinator: a-token-in-clear-0123456789\n")
    with pytest.raises(ConfigError, match="not a token verifier") as e:
        Access(tokens_file=str(tmp_path / "clear.yaml"))
    assert "a-token-in-clear" not in str(e.value)
    (tmp_path / "token").write_text("two words\n")
    with pytest.raises(ConfigError, match="one token"):
        Access(token_file=str(tmp_path / "token"))


def test_the_token_paths_come_from_the_environment(tmp_path, monkeypatch):
    """POPULORA__SERVICES__TOKENS_PATH names the file (a *_FILE variable would be read once, as the value itself)."""
    from populora.access import EVERY, Access
    from populora.tokens import verifier

    (tmp_path / "tokens.yaml").write_text(f"dashboard: {verifier('reader-token-0123456789abcdef')}\n")
    (tmp_path / "token").write_text("deployment-token-0123\n")
    monkeypatch.setenv("POPULORA__SERVICES__TOKENS_PATH", str(tmp_path / "tokens.yaml"))
    monkeypatch.setenv("POPULORA__SERVICES__TOKEN_PATH", str(tmp_path / "token"))
    access = Access.from_config(load_config().services, tls=False)
    assert access.identity("Bearer reader-token-0123456789abcdef", "", read_only=True) == "dashboard"
    assert access.identity("Bearer deployment-token-0123", "", read_only=False) == EVERY
    assert not access.open_reads
