"""Who may do what, written out by hand: every identity against every operation of every service, gRPC and REST,
allowed or refused, as the design says it (docs/operations.md, "Who may call what") and NOT read from
populora/scopes.py. Live servers on loopback are held to it, over mutual TLS (the certificate names the caller) and
with scoped tokens (the servers keep verifiers): an allowed call reaches the service, a refused one is
PERMISSION_DENIED (gRPC) or 403 (REST), names the caller's own scope on that service as the hand table gives it
(nothing of another identity's or another service's), and changes nothing. A last test holds the hand table and
populora/scopes.py to each other, so a mistake in either fails."""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

import grpc
import httpx
import pytest
from fastapi.testclient import TestClient
from google.protobuf.message_factory import GetMessageClass

from populora import rpc, scopes
from populora.access import Access
from populora.config import SandboxConfig, TasksConfig, load_config
from populora.contracts import CONTRACTS
from populora.metrics import metrics_app
from populora.pb import league_pb2
from populora.ports import free_port
from populora.tls import uvicorn_ssl
from services.league.rest import create_app as league_app
from services.league.service import LeagueService
from services.sandbox.registry import VerifierRegistry
from services.sandbox.rest import create_app as sandbox_app
from services.sandbox.service import SandboxService
from tests.security.conftest import files
from tests.security.test_scopes import TOKENS, VERIFIERS, five_servers

IDENTITIES = ("inference", "trainer", "league", "sandbox", "evolver", "coordinator", "dashboard", "verifier")

# Every operation of every service: its gRPC methods, then its REST operations that run none (`Read`: its data reads
# and /metrics; the sandbox's verifier registry).
GRPC = {
    "inference": ("Generate", "Score", "LoadAdapter", "UnloadAdapter", "ListAdapters"),
    "trainer": ("InitAdapter", "AdoptAdapter", "UpdateBatch", "DropAdapter", "WarmStart"),
    "league": ("CreateRun", "RegisterAdapters", "Matchmake", "ReportMatches", "SelectForReplacement", "RecordChild",
               "GetRatings", "GetLineage", "RecordCompute", "GetCompute", "RecordEvals", "GetEvals",
               "RecordStepSummary", "RecordRun", "RecordPhases", "RecordStepProblems"),
    "sandbox": ("Execute", "ValidateProposals", "CheckAnswers"),
    "evolver": ("Breed", "ListOperators"),
}
REST_ONLY = {"inference": ("Read",), "trainer": ("Read",), "league": ("Read",),
             "sandbox": ("Read", "RegisterVerifier", "ListVerifiers", "DeleteVerifier"), "evolver": ("Read",)}

# What each identity may do; everything else is refused. The services call one another nothing (the coordinator
# drives every phase), so a service's own identity may do nothing anywhere; an external verifier is called, and
# calls nothing.
ALLOWED = {
    "coordinator": {
        ("inference", "Generate"), ("inference", "Score"), ("inference", "LoadAdapter"),
        ("inference", "UnloadAdapter"), ("inference", "ListAdapters"),
        ("trainer", "InitAdapter"), ("trainer", "AdoptAdapter"), ("trainer", "UpdateBatch"),
        ("trainer", "DropAdapter"), ("trainer", "WarmStart"),
        ("league", "CreateRun"), ("league", "RegisterAdapters"), ("league", "Matchmake"),
        ("league", "ReportMatches"), ("league", "SelectForReplacement"), ("league", "RecordChild"),
        ("league", "GetRatings"), ("league", "RecordCompute"), ("league", "RecordEvals"),
        ("league", "RecordStepSummary"), ("league", "RecordRun"), ("league", "RecordPhases"),
        ("league", "RecordStepProblems"), ("league", "Read"),
        ("sandbox", "Execute"), ("sandbox", "ValidateProposals"), ("sandbox", "CheckAnswers"),
        ("sandbox", "RegisterVerifier"), ("sandbox", "ListVerifiers"), ("sandbox", "DeleteVerifier"),
        ("evolver", "Breed"), ("evolver", "ListOperators"),
    },
    "dashboard": {
        ("league", "GetRatings"), ("league", "GetLineage"), ("league", "GetCompute"), ("league", "GetEvals"),
        ("league", "Read"), ("inference", "Read"), ("trainer", "Read"), ("sandbox", "Read"), ("evolver", "Read"),
    },
    "inference": set(), "trainer": set(), "league": set(), "sandbox": set(), "evolver": set(), "verifier": set(),
}
TABLE = {(identity, service, op): (service, op) in ALLOWED[identity]
         for identity in IDENTITIES for service in GRPC for op in (*GRPC[service], *REST_ONLY[service])}
CONTRACT_NAMES = {"inference": "Inference", "trainer": "Trainer", "league": "League", "sandbox": "Sandbox",
                  "evolver": "Evolver"}


def hand_scope(identity: str, service: str) -> set[str]:
    """What a refusal must say `identity` may call on `service`, from the hand table: `League.GetRatings`, a REST
    operation marked `(REST)`; {"nothing"} when there is none."""
    named = {f"{CONTRACT_NAMES[service]}.{op}" + (" (REST)" if op in REST_ONLY[service] else "")
             for op in (*GRPC[service], *REST_ONLY[service]) if TABLE[identity, service, op]}
    return named or {"nothing"}


def refusal_mismatch(message: str, identity: str, service: str, op: str) -> str:
    """"" when a refusal names the call and then the caller's own scope on that service (no other identity's, no
    other service's); else what is wrong."""
    head = f"{identity} may not call {CONTRACT_NAMES[service]}.{op} "
    _, found, scope = message.partition(f"on {service} it may call: ")
    if not message.startswith(head) or not found:
        return f"{identity} {service}.{op}: the refusal does not name the call and its scope: {message}"
    if set(scope.split(", ")) != hand_scope(identity, service):
        return f"{identity} {service}.{op}: the refusal names {scope!r}, not {sorted(hand_scope(identity, service))}"
    return ""


# ---------------------------------------------------------------------------------------------------------- gRPC
def _call(client, service: str, method: str):
    m = CONTRACTS[service].methods_by_name[method]
    result = getattr(client, method)(GetMessageClass(m.input_type)())
    return list(result) if m.server_streaming else result


@pytest.mark.parametrize("transport", ["certificate", "token"])
@pytest.mark.parametrize("identity", IDENTITIES)
def test_grpc_servers_hold_each_identity_to_the_hand_table(pki, identity, transport):
    tls = transport == "certificate"
    with five_servers(pki if tls else None, None if tls else VERIFIERS) as servers:
        for service, (recorder, address) in servers.items():
            client = rpc.connect(service, address, "" if tls else TOKENS[identity], timeout=10, retries=0,
                                 tls=files(pki, identity) if tls else None)
            try:
                for method in GRPC[service]:
                    before = len(recorder.calls)
                    if TABLE[identity, service, method]:
                        _call(client, service, method)
                        assert recorder.calls[before:] == [method], (identity, service, method)
                        continue
                    with pytest.raises(rpc.ServiceError) as e:
                        _call(client, service, method)
                    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED, (identity, service, method, e.value)
                    assert refusal_mismatch(e.value.message, identity, service, method) == ""
                    assert len(recorder.calls) == before, f"{identity} -> {service}.{method} reached the service"
            finally:
                client.close()


# ---------------------------------------------------------------------------------------------------------- REST
# (service, operation) -> the request that runs it: (method, path, JSON body); {name} is the caller's identity
RUN = "r0"
REQUESTS = {
    ("league", "CreateRun"): ("POST", "/v1/runs", {"run_id": "new-{name}", "mode": "population"}),
    ("league", "RegisterAdapters"): ("POST", f"/v1/runs/{RUN}/adapters",
                                     {"adapters": [{"adapter_id": "T-{name}", "role": "teacher", "rank": 8}]}),
    ("league", "ReportMatches"): ("POST", f"/v1/runs/{RUN}/matches", {"matches": [
        {"match_id": "m-{name}", "teacher_id": "T0", "student_id": "S0", "task_type": "code_o", "step": 1,
         "rhos": [1.0]}]}),
    ("league", "RecordChild"): ("POST", f"/v1/runs/{RUN}/children", {
        "child_id": "C-{name}", "role": "teacher", "parent_ids": ["T0"], "operator": "M1", "step": 1}),
    ("league", "Read"): ("GET", f"/v1/runs/{RUN}/leaderboard", None),
    ("sandbox", "Execute"): ("POST", "/v1/execute", {}),  # past the credential, the body's check: 422
    ("sandbox", "CheckAnswers"): ("POST", "/v1/check", {}),
    ("sandbox", "RegisterVerifier"): ("POST", "/v1/verifiers", {"name": "v-{name}", "url": "https://v:9000/check",
                                                                 "task_types": ["code_o"]}),
    ("sandbox", "ListVerifiers"): ("GET", "/v1/verifiers", None),
    ("sandbox", "DeleteVerifier"): ("DELETE", "/v1/verifiers/nobody", None),
    ("sandbox", "Read"): ("GET", "/metrics", None),
    ("inference", "Read"): ("GET", "/metrics", None),
    ("trainer", "Read"): ("GET", "/metrics", None),
    ("evolver", "Read"): ("GET", "/metrics", None),
}
METRICS_OF_THE_LEAGUE = ("GET", "/metrics", None)  # the league's Read too, besides its data


def _fill(body, name: str):
    if isinstance(body, dict):
        return {k: _fill(v, name) for k, v in body.items()}
    if isinstance(body, list):
        return [_fill(v, name) for v in body]
    return body.format(name=name) if isinstance(body, str) else body


@contextmanager
def rest_apps(tmp_path, access: Access):
    """The REST apps of every service over one `access`: the league's and the sandbox's (its registry on SQLite),
    and the /metrics apps of the others; and the league's service, to look at what changed."""
    league = LeagueService.from_config(load_config(env=False, overrides=[f"run.output_dir={tmp_path}"]))
    league.CreateRun(league_pb2.CreateRunRequest(run_id=RUN, mode="population"))
    league.RegisterAdapters(league_pb2.RegisterAdaptersRequest(run_id=RUN, adapters=[
        league_pb2.AdapterSpec(adapter_id="T0", role="teacher", rank=8),
        league_pb2.AdapterSpec(adapter_id="S0", role="student", rank=8)]))
    registry = VerifierRegistry(f"sqlite:///{tmp_path / 'registry.sqlite'}")
    sandbox = SandboxService(None, TasksConfig(timeout_s=0.5), SandboxConfig(), registry)
    try:
        yield league, {"league": league_app(league, access=access), "sandbox": sandbox_app(sandbox, access=access),
                       **{s: metrics_app(s, access) for s in ("inference", "trainer", "evolver")}}
    finally:
        sandbox.external.close()
        registry.close()
        league.close()


def _league_state(league: LeagueService) -> tuple:
    ratings = league.GetRatings(league_pb2.GetRatingsRequest(run_id=RUN)).SerializeToString()
    return tuple(r["run_id"] for r in league.db.list_runs()), ratings


def _verdicts(send, identity: str, league: LeagueService) -> list[str]:
    """Each REST operation run as `identity` through `send(service, method, path, body)`, against the hand table:
    the mismatches."""
    wrong = []
    for (service, op), (method, path, body) in [*REQUESTS.items(), (("league", "Read"), METRICS_OF_THE_LEAGUE)]:
        before = _league_state(league)
        resp = send(service, method, path, _fill(body, identity))
        expected = TABLE[identity, service, op]
        refused = resp.status_code == 403
        if resp.status_code == 401 or refused == expected:
            wrong.append(f"{identity} {method} {service}{path} ({op}): {resp.status_code} {resp.text[:200]}")
        elif refused:
            if mismatch := refusal_mismatch(resp.json()["detail"], identity, service, op):
                wrong.append(mismatch)
            if _league_state(league) != before:
                wrong.append(f"{identity} {service}.{op}: refused, but the league changed")
    return wrong


@pytest.mark.parametrize("identity", IDENTITIES)
def test_rest_apps_hold_each_scoped_token_to_the_hand_table(tmp_path, identity):
    with rest_apps(tmp_path, Access(tokens=VERIFIERS)) as (league, apps), ExitStack() as stack:
        clients = {s: stack.enter_context(TestClient(app)) for s, app in apps.items()}
        auth = {"Authorization": f"Bearer {TOKENS[identity]}"}

        def send(service, method, path, body):
            return clients[service].request(method, path, json=body, headers=auth)

        assert _verdicts(send, identity, league) == []


def test_rest_servers_over_https_hold_each_certificate_to_the_hand_table(tmp_path, pki):
    """The same apps on uvicorn over HTTPS (populora.tls.uvicorn_ssl), no token anywhere: the client certificate
    alone names the caller."""
    import ssl
    import threading
    import time

    import uvicorn

    with rest_apps(tmp_path, Access(tls=True)) as (league, apps):
        servers, urls = [], {}
        try:
            for service, app in apps.items():
                port = free_port()
                server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                       **uvicorn_ssl(files(pki, service))))
                threading.Thread(target=server.run, daemon=True).start()
                servers.append(server)
                urls[service] = f"https://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while not all(s.started for s in servers):
                assert time.monotonic() < deadline, "the REST servers did not start"
                time.sleep(0.05)
            for identity in IDENTITIES:
                ctx = ssl.create_default_context(cafile=str(files(pki, identity).ca))
                ctx.load_cert_chain(files(pki, identity).cert, files(pki, identity).key)
                with httpx.Client(verify=ctx, timeout=30) as client:
                    def send(service, method, path, body, client=client):
                        return client.request(method, urls[service] + path, json=body)

                    assert _verdicts(send, identity, league) == []
        finally:
            for server in servers:
                server.should_exit = True


# ------------------------------------------------------------------------------------------- table against code
def test_the_hand_table_and_populora_scopes_agree():
    """The same identities, services and operations (a method added to a contract, or a REST operation, must be
    written into the hand table), and the same verdict on each."""
    assert set(IDENTITIES) == set(scopes.IDENTITIES)
    assert {s: {m.name for m in CONTRACTS[s].methods} for s in CONTRACTS} == {s: set(m) for s, m in GRPC.items()}
    assert {s: set(ops) for s, ops in scopes.REST_OPERATIONS.items()} == {s: set(o) for s, o in REST_ONLY.items()}
    disagree = [f"{i} {s}.{op}: hand {'allowed' if verdict else 'refused'}"
                for (i, s, op), verdict in TABLE.items()
                if verdict != (scopes.rest_allowed(i, s, op) if op in REST_ONLY[s] else scopes.allowed(i, s, op))]
    assert disagree == []
    assert {(s, op) for s in REST_ONLY for op in REST_ONLY[s]} <= set(REQUESTS)  # each is tried over REST
    assert {s: c.name for s, c in CONTRACTS.items()} == CONTRACT_NAMES
