"""The REST operations of the league and the sandbox under scoped tokens, generated from the scope table: each write
takes the server's token, or a scoped token whose identity may call the gRPC method the write runs; any other is
403 and changes nothing, no token 401, whatever the body (the credential is checked before it is read). With scoped
tokens the reads need a reader's credential too. The verifier registry takes an identity whose REST scope holds it.
Over TLS (`populora serve` with services.tls on), REST answers HTTPS with the service's certificate, plaintext is
refused, and a client certificate names the caller as over gRPC."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from populora import rpc
from populora.access import Access
from populora.config import SandboxConfig, TasksConfig, load_config
from populora.pb import league_pb2
from populora.ports import free_port
from populora.scopes import IDENTITIES, allowed, rest_allowed
from services.league.rest import create_app as league_app
from services.league.service import LeagueService
from services.sandbox.rest import create_app as sandbox_app
from services.sandbox.service import SandboxService
from tests.conftest import TEST_TOKEN
from tests.security.conftest import files
from tests.security.test_scopes import TOKENS, VERIFIERS

# each league REST write: (path, body, the gRPC method it runs)
RUN = {"run_id": "r1", "mode": "population"}
WRITES = [("/v1/runs", RUN, "CreateRun"),
          ("/v1/runs/r0/adapters", {"adapters": [{"adapter_id": "T9", "role": "teacher", "rank": 8}]},
           "RegisterAdapters"),
          ("/v1/runs/r0/matches", {"matches": [{"match_id": "m1", "teacher_id": "T0", "student_id": "S0",
                                                "task_type": "code_o", "step": 1, "rhos": [1.0]}]},
           "ReportMatches"),
          ("/v1/runs/r0/children", {"child_id": "T8", "role": "teacher", "parent_ids": ["T0"], "operator": "M1",
                                    "step": 1}, "RecordChild")]


def _bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def league(tmp_path):
    service = LeagueService.from_config(load_config(env=False, overrides=[f"run.output_dir={tmp_path}"]))
    service.CreateRun(league_pb2.CreateRunRequest(run_id="r0", mode="population"))
    service.RegisterAdapters(league_pb2.RegisterAdaptersRequest(run_id="r0", adapters=[
        league_pb2.AdapterSpec(adapter_id="T0", role="teacher", rank=8),
        league_pb2.AdapterSpec(adapter_id="S0", role="student", rank=8)]))
    yield service
    service.close()


def _state(service) -> tuple:
    ratings = service.GetRatings(league_pb2.GetRatingsRequest(run_id="r0")).SerializeToString()
    return service.db.run_exists("r1"), ratings  # a new run, a new adapter or child, a match's rating change


@pytest.mark.parametrize("identity", IDENTITIES)
def test_each_scoped_token_writes_only_within_its_scope_on_the_league(league, identity):
    with TestClient(league_app(league, access=Access(tokens=VERIFIERS))) as client:
        for path, body, method in WRITES:
            before = _state(league)
            resp = client.post(path, json=body, headers=_bearer(TOKENS[identity]))
            if allowed(identity, "league", method):
                assert resp.status_code in (200, 201), (identity, path, resp.text)
                continue
            assert resp.status_code == 403, (identity, path, resp.text)
            assert f"{identity} may not call League.{method}" in resp.json()["detail"]
            assert _state(league) == before, (identity, path)
            # a body that is not even JSON: still the credential's answer, never the body's
            bad = client.post(path, content=b"{not json", headers={**_bearer(TOKENS[identity]),
                                                                   "Content-Type": "application/json"})
            assert bad.status_code == 403, (identity, path, bad.text)


def test_the_league_without_a_credential_is_401_and_the_servers_token_opens_all(league):
    with TestClient(league_app(league, access=Access(tokens=VERIFIERS))) as client:
        for path, body, _ in WRITES:
            for headers in ({}, _bearer("not-a-token"), _bearer(VERIFIERS["coordinator"])):  # a verifier is no token
                resp = client.post(path, json=body, headers=headers)
                assert resp.status_code == 401 and "token" in resp.json()["detail"], resp.text
                assert resp.headers["www-authenticate"].startswith("Bearer")
                malformed = client.post(path, content=b"[1, 2", headers={**headers,
                                                                          "Content-Type": "application/json"})
                assert malformed.status_code == 401, malformed.text  # 401 before 422
        assert not league.db.run_exists("r1")
    league.token = TEST_TOKEN
    with TestClient(league_app(league, access=Access(TEST_TOKEN, VERIFIERS))) as client:
        for path, body, _ in WRITES:
            assert client.post(path, json=body, headers=_bearer(TEST_TOKEN)).status_code in (200, 201), path


def test_the_sandbox_rest_holds_each_scoped_token_to_its_scope():
    service = SandboxService(None, TasksConfig(timeout_s=0.5), SandboxConfig(), None)
    with TestClient(sandbox_app(service, access=Access(tokens=VERIFIERS))) as client:
        for identity in IDENTITIES:
            for path, method in (("/v1/execute", "Execute"), ("/v1/check", "CheckAnswers")):
                resp = client.post(path, json={}, headers=_bearer(TOKENS[identity]))
                # a call in scope gets past the credential to the body's check (422), one outside stops at 403
                assert resp.status_code == (422 if allowed(identity, "sandbox", method) else 403), (identity, path)
                if resp.status_code == 403:  # its own scope on the sandbox only: no other service's methods
                    assert "League." not in resp.json()["detail"] and "Trainer." not in resp.json()["detail"]
            resp = client.get("/v1/verifiers", headers=_bearer(TOKENS[identity]))
            # this sandbox has no registry: an identity that may list gets that far (409), the others 403
            assert resp.status_code == (409 if rest_allowed(identity, "sandbox", "ListVerifiers") else 403), identity
            resp = client.get("/metrics", headers=_bearer(TOKENS[identity]))
            assert resp.status_code == (200 if rest_allowed(identity, "sandbox", "Read") else 403), identity
        assert client.post("/v1/execute", json={}).status_code == 401
        assert client.get("/metrics").status_code == 401


def test_with_scoped_tokens_the_league_reads_need_a_readers_credential(league):
    reads = ["/v1/runs", "/v1/runs/r0/leaderboard", "/v1/runs/r0/overview", "/v1/adapters/T0/lineage", "/metrics"]
    with TestClient(league_app(league, access=Access(tokens=VERIFIERS))) as client:
        for path in reads:
            assert client.get(path).status_code == 401, path
            for identity in IDENTITIES:
                resp = client.get(path, headers=_bearer(TOKENS[identity]))
                assert resp.status_code == (200 if rest_allowed(identity, "league", "Read") else 403), (identity, path)
        assert client.get("/healthz").status_code == 200 and client.get("/").status_code == 200
    with TestClient(league_app(league, access=Access(TEST_TOKEN))) as client:  # plaintext, no scoped tokens
        for path in reads:
            assert client.get(path).status_code == 200, path  # one machine: the reads are open


def _serve(tmp_path, pki, *extra: str) -> tuple[subprocess.Popen, int, int]:
    grpc_port, rest_port = free_port(), free_port()
    env = {**os.environ, "POPULORA_TOKEN": TEST_TOKEN, "POPULORA_LOG_JSON": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator.cli", "serve", "league", "--port", str(grpc_port),
         "--set", f"run.output_dir={tmp_path}", "--set", f"services.league.rest_port={rest_port}", *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, grpc_port, rest_port


def test_populora_serve_answers_rest_over_tls_and_refuses_plaintext(tmp_path, pki, other_pki):
    proc, grpc_port, rest_port = _serve(tmp_path, pki, "--set", "services.tls.enabled=true",
                                        "--set", f"services.tls.dir={pki}")
    ca = ssl.create_default_context(cafile=str(files(pki, "league").ca))
    try:
        rpc.wait_ready(f"127.0.0.1:{grpc_port}", timeout=60, tls=files(pki, "coordinator"), server_name="league")
        url = f"https://127.0.0.1:{rest_port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                resp = httpx.get(f"{url}/healthz", verify=ca, timeout=5)
                break
            except httpx.ConnectError as e:
                if time.monotonic() > deadline or "CERTIFICATE" in str(e).upper():
                    raise
                time.sleep(0.2)
        assert resp.status_code == 200
        assert httpx.post(f"{url}/v1/runs", json=RUN, verify=ca).status_code == 401
        assert httpx.post(f"{url}/v1/runs", json=RUN, verify=ca, headers=_bearer(TEST_TOKEN)).json()["created"]
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{rest_port}/healthz", timeout=5).raise_for_status()
        with pytest.raises(httpx.ConnectError):  # a client that trusts another CA does not take this server
            httpx.get(f"{url}/healthz", verify=ssl.create_default_context(cafile=str(files(other_pki, "league").ca)), timeout=5)
        with pytest.raises(Exception):  # noqa: B017 - plaintext gRPC: the handshake fails
            rpc.health_check(f"127.0.0.1:{grpc_port}", timeout=5)
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0].decode()
    assert "mutual TLS as league" in out and f"https://127.0.0.1:{rest_port}" in out, out


def test_the_dashboard_serves_https_with_its_certificate_and_refuses_plain_http_outside_loopback(tmp_path, pki):
    from populora.tls import TlsError
    from services.league.rest_server import dashboard_server

    over = [f"run.output_dir={tmp_path}", "services.tls.enabled=true", f"services.tls.dir={pki}"]
    server = dashboard_server(load_config(env=False, overrides=over), port=free_port(), existing=False).start()
    try:
        assert server.url.startswith("https://")
        ca = ssl.create_default_context(cafile=str(files(pki, "dashboard").ca))
        assert httpx.get(f"{server.url}healthz", verify=ca, timeout=10).status_code == 200
    finally:
        server.stop()
    plain = load_config(env=False, overrides=[f"run.output_dir={tmp_path}"])
    with pytest.raises(TlsError, match="plaintext HTTP on 0.0.0.0"):
        dashboard_server(plain, host="0.0.0.0", port=free_port(), existing=False)
    dashboard_server(plain, host="0.0.0.0", port=free_port(), existing=False, insecure=True).service.close()


def _https(pki, identity: str | None) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(files(pki, "league").ca))
    if identity:
        mine = files(pki, identity)
        ctx.load_cert_chain(mine.cert, mine.key)
    return httpx.Client(verify=ctx, timeout=30)


def test_over_https_the_client_certificate_names_the_caller(league, pki):
    """The league's REST app with TLS and no token at all: each identity's certificate is held to its scope (a
    certificate beats a bearer token of another identity), no certificate is 401 before any body is read."""
    from services.league.rest_server import LeagueRestServer

    server = LeagueRestServer(league, port=free_port(), read_only=False, tls=files(pki, "league"),
                              access=Access(tls=True)).start()
    url = server.url.rstrip("/")
    try:
        with _https(pki, None) as anonymous:
            assert anonymous.get(f"{url}/v1/runs").status_code == 401
            assert anonymous.post(f"{url}/v1/runs", content=b"{oops", headers={
                "Content-Type": "application/json"}).status_code == 401
            assert anonymous.get(f"{url}/healthz").status_code == 200
        for identity in IDENTITIES:
            with _https(pki, identity) as client:
                read = client.get(f"{url}/v1/runs/r0/leaderboard")
                assert read.status_code == (200 if rest_allowed(identity, "league", "Read") else 403), identity
                body = {"run_id": f"r-{identity}", "mode": "population"}
                # another identity's token beside the certificate changes nothing: the certificate names the caller
                write = client.post(f"{url}/v1/runs", json=body, headers=_bearer(TOKENS["coordinator"]))
                assert write.status_code == (200 if allowed(identity, "league", "CreateRun") else 403), identity
                assert league.db.run_exists(f"r-{identity}") == allowed(identity, "league", "CreateRun")
                if write.status_code == 403:
                    assert write.json()["detail"].startswith(f"{identity} may not call League.CreateRun")
    finally:
        server.server.should_exit = True
        server._thread.join(10)
