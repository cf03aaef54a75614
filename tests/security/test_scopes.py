"""Scoped credentials: the table of who may call what (populora.scopes) is what the code calls, docs/operations.md
shows it as generated, and every server enforces it. The matrix is generated from the table: every identity
against every method of every service, by its certificate (mutual TLS) and by its scoped token (plaintext); a call
outside the identity's scope is refused PERMISSION_DENIED and never reaches the service, a call inside reaches it."""

from __future__ import annotations

import re
from contextlib import ExitStack, contextmanager
from pathlib import Path

import grpc
import pytest
from google.protobuf.message_factory import GetMessageClass

from populora import certs, rpc, scopes, tokens
from populora.config import load_config
from populora.contracts import CONTRACTS, SERVICE_NAMES
from populora.pb import league_pb2
from populora.scopes import IDENTITIES, SCOPES, allowed
from services.league.service import LeagueService
from tests.conftest import TEST_TOKEN
from tests.security.conftest import files

ROOT = Path(__file__).resolve().parents[2]
CALLERS = ("coordinator", "populora/evals")  # where the code that calls the services over gRPC lives
TOKENS = {identity: f"token-of-{identity}-0123456789" for identity in IDENTITIES}  # what each client holds
VERIFIERS = {identity: tokens.verifier(token) for identity, token in TOKENS.items()}  # what the servers keep


class Recorder:
    """A service of one contract that records each call it gets and answers an empty response."""

    def __init__(self, name: str):
        self.CONTRACT, self.calls = CONTRACTS[name], []
        for m in self.CONTRACT.methods:
            response = GetMessageClass(m.output_type)

            def unary(request, method=m.name, response=response):
                self.calls.append(method)
                return response()

            def stream(request, method=m.name, response=response):
                self.calls.append(method)
                yield response()

            setattr(self, m.name, stream if m.server_streaming else unary)


@contextmanager
def five_servers(pki: Path | None, verifiers: dict[str, str] | None = None):
    """A recording server per service: with its own certificate (pki) or plaintext with the scoped tokens'
    verifiers."""
    with ExitStack() as stack:
        out = {}
        for name in SERVICE_NAMES:
            recorder = Recorder(name)
            server, port, _ = rpc.make_server([recorder], 0, "127.0.0.1", "", tls=files(pki, name) if pki else None,
                                              tokens=verifiers)
            stack.callback(server.stop, None)
            out[name] = (recorder, f"127.0.0.1:{port}")
        yield out


def _call(client, service: str, method: str):
    m = CONTRACTS[service].methods_by_name[method]
    request = GetMessageClass(m.input_type)()
    result = getattr(client, method)(request)
    return list(result) if m.server_streaming else result


def _matrix(servers, identity: str, tls_dir: Path | None, token: str) -> None:
    for service, (recorder, address) in servers.items():
        client = rpc.connect(service, address, token, timeout=10, retries=0,
                             tls=files(tls_dir, identity) if tls_dir else None)
        try:
            for m in CONTRACTS[service].methods:
                before = list(recorder.calls)
                if allowed(identity, service, m.name):
                    _call(client, service, m.name)
                    assert recorder.calls == [*before, m.name], f"{identity} -> {service}.{m.name} did not arrive"
                    continue
                with pytest.raises(rpc.ServiceError) as e:
                    _call(client, service, m.name)
                assert e.value.code == grpc.StatusCode.PERMISSION_DENIED, (identity, service, m.name, e.value)
                assert f"{identity} may not call {CONTRACTS[service].name}.{m.name}" in e.value.message
                # what it may call on this service only: no other service's methods
                assert not [c.name for n, c in CONTRACTS.items() if n != service and f"{c.name}." in e.value.message]
                assert recorder.calls == before, f"{identity} -> {service}.{m.name} reached the service"
        finally:
            client.close()


@pytest.mark.parametrize("identity", IDENTITIES)
def test_each_certificate_is_held_to_its_scope(pki, identity):
    with five_servers(pki) as servers:
        _matrix(servers, identity, pki, token="")


@pytest.mark.parametrize("identity", IDENTITIES)
def test_each_scoped_token_is_held_to_its_scope(identity):
    with five_servers(None, VERIFIERS) as servers:
        _matrix(servers, identity, None, token=TOKENS[identity])


def test_the_sandbox_and_the_dashboard_write_nothing():
    for identity in ("sandbox", "dashboard", "verifier"):
        for service, methods in SCOPES.get(identity, {}).items():
            assert all(scopes.kind(service, m) == scopes.READ for m in methods), (identity, service)
    assert not any(SCOPES.get("sandbox", {}).values())


def test_with_scoped_tokens_every_call_needs_one_and_the_deployment_token_opens_all():
    with five_servers(None, VERIFIERS) as servers:
        recorder, address = servers["league"]
        anonymous = rpc.connect("league", address, "", timeout=10, retries=0)
        with pytest.raises(rpc.ServiceError) as e:
            anonymous.GetRatings(league_pb2.GetRatingsRequest())
        assert e.value.code == grpc.StatusCode.UNAUTHENTICATED and "own token" in e.value.message
        anonymous.close()
        assert recorder.calls == []
    # services.token beside the scoped ones: every method, as the one token always opened
    server, port, _ = rpc.make_server([Recorder("league")], 0, "127.0.0.1", TEST_TOKEN, tokens=VERIFIERS)
    try:
        client = rpc.connect("league", f"127.0.0.1:{port}", TEST_TOKEN, timeout=10, retries=0)
        for m in CONTRACTS["league"].methods:
            _call(client, "league", m.name)
        client.close()
    finally:
        server.stop(None)


def test_a_certificate_naming_no_identity_is_refused(pki, tmp_path):
    ca_key, ca_cert = certs.load_ca(pki)
    key, cert = certs.issue(ca_key, ca_cert, "mallory", days=1)
    certs.write_private(tmp_path / "mallory-key.pem", certs.key_pem(key))
    certs.write_public(tmp_path / "mallory.pem", certs.cert_pem(cert))
    mallory = type(files(pki, "league"))("mallory", certs.ca_file(pki), tmp_path / "mallory.pem",
                                         tmp_path / "mallory-key.pem")
    with five_servers(pki) as servers:
        recorder, address = servers["league"]
        client = rpc.connect("league", address, TEST_TOKEN, timeout=10, retries=0, tls=mallory)
        with pytest.raises(rpc.ServiceError) as e:
            client.GetRatings(league_pb2.GetRatingsRequest())
        client.close()
        assert e.value.code == grpc.StatusCode.UNAUTHENTICATED and "mallory" in e.value.message
        assert recorder.calls == []


def test_a_real_league_refuses_the_sandbox_and_takes_the_coordinator(pki, tmp_path):
    league = LeagueService.from_config(load_config(env=False, overrides=[f"run.output_dir={tmp_path}"]))
    server, port, _ = rpc.make_server([league], 0, "127.0.0.1", "", tls=files(pki, "league"))
    address = f"127.0.0.1:{port}"
    try:
        create = league_pb2.CreateRunRequest(run_id="r1", mode="population")
        sandbox = rpc.connect("league", address, TEST_TOKEN, timeout=10, retries=0, tls=files(pki, "sandbox"))
        with pytest.raises(rpc.ServiceError) as e:
            sandbox.CreateRun(create)
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert not league.db.run_exists("r1")
        coordinator = rpc.connect("league", address, "", timeout=10, retries=0, tls=files(pki, "coordinator"))
        assert coordinator.CreateRun(create).created
        dashboard = rpc.connect("league", address, "", timeout=10, retries=0, tls=files(pki, "dashboard"))
        assert dashboard.GetRatings(league_pb2.GetRatingsRequest(run_id="r1")).ratings == []
        for client in (sandbox, coordinator, dashboard):
            client.close()
    finally:
        server.stop(None)
        league.close()


def _called_methods() -> dict[str, set[str]]:
    """service -> the methods of its contract that the callers' code calls (`.Method(`)."""
    text = "\n".join(p.read_text() for d in CALLERS for p in sorted((ROOT / d).rglob("*.py")))
    return {s: {m.name for m in CONTRACTS[s].methods if re.search(rf"\.{m.name}\(", text)} for s in SERVICE_NAMES}


def test_the_coordinators_scope_is_what_its_code_calls():
    called = _called_methods()
    assert {s: set(SCOPES["coordinator"].get(s, ())) for s in SERVICE_NAMES} == called


def test_no_service_calls_another_over_grpc():
    for path in sorted((ROOT / "services").rglob("*.py")):
        text = path.read_text()
        assert not re.search(r"\b(rpc\.connect|Remote\(|open_services|coordinator\.services)", text), path


def test_operations_md_shows_the_table_as_generated():
    doc = (ROOT / "docs" / "operations.md").read_text()
    begin, end = "<!-- scopes: generated by `python -m populora.scopes` -->\n", "<!-- scopes: end -->"
    assert begin in doc and end in doc, "docs/operations.md lacks the generated scope table"
    shown = doc.split(begin, 1)[1].split(end, 1)[0]
    assert shown == scopes.table_markdown(), "regenerate it: python -m populora.scopes"
