"""Mutual TLS on the gRPC connections: a client with its certificate from the deployment's CA reaches a server
that presents the name it expects; a plaintext client, a client without a certificate, with one from another CA
or an expired one, and a server presenting another service's name are refused at the handshake, and nothing
changes. A plaintext server on an address other machines reach does not start unless told."""

from __future__ import annotations

import logging
from contextlib import contextmanager

import grpc
import pytest

from coordinator.cli import main as cli_main
from populora import rpc
from populora.config import load_config
from populora.pb import league_pb2
from populora.tls import TlsError, check_bind, tls_files
from services.league.service import LeagueService
from tests.conftest import TEST_TOKEN
from tests.security.conftest import files


@pytest.fixture
def league(tmp_path):
    service = LeagueService.from_config(load_config(env=False, overrides=[f"run.output_dir={tmp_path}"]))
    yield service
    service.close()


@contextmanager
def tls_server(service, server_files):
    server, port, _ = rpc.make_server([service], 0, "127.0.0.1", TEST_TOKEN, tls=server_files)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def _create(address, client_files, name="league"):
    client = rpc.connect(name, address, TEST_TOKEN, timeout=10, retries=0, tls=client_files)
    try:
        return client.CreateRun(league_pb2.CreateRunRequest(run_id="r1", mode="population"))
    finally:
        client.close()


def test_mutual_tls_carries_calls(league, pki):
    with tls_server(league, files(pki, "league")) as address:
        assert _create(address, files(pki, "coordinator")).created
        assert rpc.health_check(address, tls=files(pki, "coordinator"), server_name="league") == "SERVING"
    assert league.db.run_exists("r1")


def _refused(league, address, client_files) -> None:
    with pytest.raises(rpc.ServiceError) as e:
        _create(address, client_files)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE  # the handshake failed: no call reached the service
    assert not league.db.run_exists("r1")


def test_a_plaintext_client_is_refused(league, pki):
    with tls_server(league, files(pki, "league")) as address:
        _refused(league, address, None)


def test_a_client_without_a_certificate_is_refused(league, pki):
    with tls_server(league, files(pki, "league")) as address:
        ca = files(pki, "league").ca.read_bytes()
        channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=ca),
                                      options=[("grpc.ssl_target_name_override", "league")])
        call = channel.unary_unary("/populora.v1.League/CreateRun",
                                   request_serializer=league_pb2.CreateRunRequest.SerializeToString,
                                   response_deserializer=league_pb2.CreateRunResponse.FromString)
        with pytest.raises(grpc.RpcError) as e:
            call(league_pb2.CreateRunRequest(run_id="r1"), timeout=10,
                 metadata=(("authorization", f"Bearer {TEST_TOKEN}"),))
        channel.close()
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert not league.db.run_exists("r1")


def test_a_certificate_from_another_ca_is_refused(league, pki, other_pki):
    with tls_server(league, files(pki, "league")) as address:
        _refused(league, address, files(other_pki, "coordinator"))


def test_an_expired_certificate_is_refused(league, pki, expired):
    with tls_server(league, files(pki, "league")) as address:
        _refused(league, address, expired)


def test_a_server_with_another_services_name_is_refused(league, pki):
    with tls_server(league, files(pki, "sandbox")) as address:  # the sandbox's certificate on the league's port
        _refused(league, address, files(pki, "coordinator"))


def test_a_server_from_another_ca_is_refused(league, pki, other_pki):
    with tls_server(league, files(other_pki, "league")) as address:
        _refused(league, address, files(pki, "coordinator"))


def test_tls_files_from_the_config(pki, tmp_path):
    tls = load_config(env=False, overrides=["services.tls.enabled=true", f"services.tls.dir={pki}"]).services.tls
    assert tls_files(tls, "league") == files(pki, "league")
    assert tls_files(tls) == files(pki, "coordinator")
    assert tls_files(load_config(env=False).services.tls, "league") is None
    reader = load_config(env=False, overrides=["services.tls.enabled=true", f"services.tls.dir={pki}",
                                               "services.tls.identity=dashboard"]).services.tls
    assert tls_files(reader).identity == "dashboard" and tls_files(reader, "league").identity == "league"


def test_a_missing_file_names_itself_and_the_command_that_makes_it(tmp_path):
    tls = load_config(env=False, overrides=["services.tls.enabled=true", f"services.tls.dir={tmp_path}"])
    with pytest.raises(TlsError, match=r"ca\.pem does not exist.*populora certs --dir .* --name trainer"):
        tls_files(tls.services.tls, "trainer")
    with pytest.raises(TlsError, match="services.tls.dir"):
        tls_files(load_config(env=False, overrides=["services.tls.enabled=true"]).services.tls)
    with pytest.raises(TlsError, match="mallory"):
        tls_files(load_config(env=False, overrides=["services.tls.enabled=true", f"services.tls.dir={tmp_path}",
                                                    "services.tls.identity=mallory"]).services.tls)


def test_a_plaintext_server_on_a_reachable_address_needs_insecure(pki, caplog):
    for host in ("127.0.0.1", "localhost", "::1", "[::1]"):
        check_bind("league", host, None, insecure=False)
    check_bind("league", "0.0.0.0", files(pki, "league"), insecure=False)
    with pytest.raises(TlsError, match="--insecure"):
        check_bind("league", "0.0.0.0", None, insecure=False)
    with caplog.at_level(logging.WARNING, logger="populora.tls"):
        check_bind("league", "10.1.2.3", None, insecure=True)
    assert "plaintext gRPC on 10.1.2.3 (--insecure)" in caplog.text


def test_populora_serve_refuses_before_building_the_service(tmp_path, capsys):
    code = cli_main(["serve", "league", "--bind", "0.0.0.0", "--port", "1", "--set", f"run.output_dir={tmp_path}"])
    assert code == 2
    assert "refusing to serve plaintext gRPC on 0.0.0.0" in capsys.readouterr().err
    assert not (tmp_path / "league.db").exists() and not any(tmp_path.iterdir())
    code = cli_main(["serve", "league", "--set", "services.tls.enabled=true", "--set", f"services.tls.dir={tmp_path}"])
    assert code == 2 and "populora certs" in capsys.readouterr().err


def test_a_server_reads_new_certificates_and_a_ca_bundle_without_a_restart(league, tmp_path):
    """Rotation: the server's CA file becomes old + new CA and its certificate one from the new CA; the server,
    still running, takes a client of either CA, and a client that checks against the new CA only."""
    from populora import certs

    old, new = tmp_path / "old", tmp_path / "new"
    certs.write_certs(old, ["league", "coordinator"], days=1)
    certs.write_certs(new, ["league", "coordinator"], days=1)
    live = tmp_path / "live"
    live.mkdir()
    for name in ("ca.pem", "league.pem", "league-key.pem"):
        (live / name).write_bytes((old / name).read_bytes())
    server_files = files(live, "league")
    with tls_server(league, server_files) as address:
        assert _create(address, files(old, "coordinator")).created
        with pytest.raises(rpc.ServiceError):  # not yet: the new CA's client
            _create(address, files(new, "coordinator"))
        certs.write_public(live / "ca.pem", (old / "ca.pem").read_bytes() + (new / "ca.pem").read_bytes())
        certs.write_private(live / "league-key.pem", (new / "league-key.pem").read_bytes())
        certs.write_public(live / "league.pem", (new / "league.pem").read_bytes())
        assert not _create(address, files(new, "coordinator")).created  # the run exists: no second creation
        bundle = files(old, "coordinator")
        both = tmp_path / "both.pem"
        both.write_bytes(server_files.ca.read_bytes())
        assert not _create(address, type(bundle)("coordinator", both, bundle.cert, bundle.key)).created


def test_the_container_health_check_speaks_mutual_tls_where_the_config_turns_it_on(league, pki, monkeypatch,
                                                                                  capsys):
    from populora import healthcheck

    with tls_server(league, files(pki, "league")) as address:
        monkeypatch.setenv("POPULORA_SERVICE", "league")
        monkeypatch.setenv("POPULORA__SERVICES__TLS__ENABLED", "true")
        monkeypatch.setenv("POPULORA__SERVICES__TLS__DIR", str(pki))
        assert healthcheck.main([address]) == 0
        monkeypatch.setenv("POPULORA__SERVICES__TLS__ENABLED", "false")
        assert healthcheck.main([address, "--timeout", "2"]) == 1  # plaintext: refused at the handshake
        monkeypatch.setenv("POPULORA__SERVICES__TLS__ENABLED", "true")
        monkeypatch.setenv("POPULORA__SERVICES__TLS__DIR", str(pki / "nowhere"))
        assert healthcheck.main([address]) == 1
    assert "populora certs" in capsys.readouterr().err
