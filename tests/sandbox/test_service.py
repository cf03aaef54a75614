"""The service over real transports: REST (uvicorn on loopback) with a real external verifier over HTTP and the
registry in Postgres, and a gRPC round trip through the same service."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from populora.config import SandboxConfig, TasksConfig
from populora.pb import sandbox_pb2
from populora.rpc import ServiceError
from populora.tasks import Triplet
from services.sandbox.external import ExternalVerifiers
from services.sandbox.registry import VerifierRegistry
from services.sandbox.service import SandboxService
from tests.conftest import served
from tests.sandbox.conftest import serve_rest

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class _Verifier(BaseHTTPRequestHandler):
    """A real external verifier: correct iff the response text says YES; `mode` makes it fail on purpose."""

    mode = "ok"
    calls = 0

    def do_POST(self):  # noqa: N802 - http.server's name
        type(self).calls += 1
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.mode == "500":
            self.send_response(500)
            self.end_headers()
            return
        if self.mode == "slow":
            time.sleep(1.5)
        results = [{"attempt_id": a["attempt_id"], "outcome": "correct" if "YES" in a["response_text"] else "wrong",
                    "detail": f"{body['task_type']}:{a['task']['program'][:10]}"} for a in body["attempts"]]
        if self.mode == "garbage":
            results = [{"attempt_id": "nope", "outcome": "maybe"}]
        data = json.dumps({"results": results}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def verifier_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Verifier)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Verifier.mode, _Verifier.calls = "ok", 0
    yield f"http://127.0.0.1:{server.server_address[1]}/check"
    server.shutdown()
    server.server_close()


@pytest.fixture
def service(zygote, pg_url):
    sandbox = SandboxConfig(verifiers={"code_i": "ext"}, verifier_timeout_s=0.5, verifier_retries=1,
                            breaker_failures=2, breaker_reset_s=0.5)
    registry = VerifierRegistry(pg_url)
    svc = SandboxService(zygote, TasksConfig(timeout_s=1.0), sandbox, registry,
                         ExternalVerifiers(0.5, 1, 2, 0.5), token=TOKEN)
    yield svc
    svc.external.close()
    registry.close()


@pytest.fixture
def rest(service):
    from services.sandbox.rest import create_app

    with serve_rest(create_app(service)) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def _attempt(aid: str, task_type: str, text: str) -> dict:
    return {"attempt_id": aid, "response_text": f"<think>t</think><answer>{text}</answer>",
            "task": {"task_type": task_type, "program": "def f(a):\n    return a + 1", "inputs": ["1"],
                     "outputs": ["2"]}}


@pytest.mark.slow
def test_rest_execute_check_and_external_verifiers(rest, verifier_url):
    assert rest.get("/healthz").json()["backend"] == "zygote"
    # auth and validation of the request body
    assert rest.post("/v1/execute", json={"jobs": []}).status_code == 401
    assert rest.post("/v1/execute", json={"jobs": []}, headers={"Authorization": "Bearer wrong"}).status_code == 401
    bad = rest.post("/v1/execute", json={"jobs": [{"program": "1", "timeout_s": 999}]}, headers=AUTH)
    assert bad.status_code == 422 and "timeout_s" in json.dumps(bad.json())
    out = rest.post("/v1/execute", headers=AUTH, json={"jobs": [
        {"job_id": "a", "program": "def f(x):\n    print('hi')\n    return x * 2", "call": "f(21)"},
        {"job_id": "b", "program": "while True: pass", "timeout_s": 0.5}]}).json()["results"]
    assert (out[0]["status"], out[0]["value_repr"], out[0]["stdout"]) == ("ok", "42", "hi\n")
    assert out[1]["status"] == "timeout"
    assert 'populora_sandbox_results_total{status="timeout"}' in rest.get("/metrics").text

    # the verifier registry
    bad = rest.post("/v1/verifiers", headers=AUTH, json={"name": "ext", "url": "ftp://x", "task_types": ["code_i"]})
    assert bad.status_code == 422 and "url" in json.dumps(bad.json())
    bad = rest.post("/v1/verifiers", headers=AUTH, json={"name": "ext", "url": verifier_url, "task_types": ["x"]})
    assert bad.status_code == 422 and "task_types" in json.dumps(bad.json())
    assert rest.post("/v1/verifiers", json={"name": "ext", "url": verifier_url, "task_types": ["code_i"]}
                     ).status_code == 401
    # not registered yet: routed attempts are verifier_error, the others go to the sandbox
    res = rest.post("/v1/check", headers=AUTH, json={"attempts": [_attempt("i1", "code_i", "YES"),
                                                                 _attempt("o1", "code_o", "2")]}).json()["results"]
    assert [(r["outcome"], r["verifier"]) for r in res] == [("verifier_error", "ext"), ("correct", "sandbox")]
    made = rest.post("/v1/verifiers", headers=AUTH, json={"name": "ext", "url": verifier_url,
                                                          "task_types": ["code_i"]})
    assert made.status_code == 201 and made.json()["url"] == verifier_url
    assert [v["name"] for v in rest.get("/v1/verifiers", headers=AUTH).json()] == ["ext"]
    assert rest.get("/v1/verifiers").status_code == 401  # its URLs are for those who hold the credential
    res = rest.post("/v1/check", headers=AUTH, json={"attempts": [
        _attempt("i1", "code_i", "YES"), _attempt("i2", "code_i", "no"), _attempt("o1", "code_o", "3")]}
    ).json()["results"]
    assert [(r["attempt_id"], r["outcome"], r["verifier"]) for r in res] == [
        ("i1", "correct", "ext"), ("i2", "wrong", "ext"), ("o1", "wrong", "sandbox")]
    assert res[0]["detail"] == "code_i:def f(a):\n"

    # a failing verifier: verifier_error, retried, then the breaker opens and calls stop
    for mode in ("500", "garbage", "slow"):
        _Verifier.mode = mode
        r = rest.post("/v1/check", headers=AUTH, json={"attempts": [_attempt("i1", "code_i", "YES")]}).json()
        assert r["results"][0]["outcome"] == "verifier_error", mode
    _Verifier.mode, before = "500", _Verifier.calls
    r = rest.post("/v1/check", headers=AUTH, json={"attempts": [_attempt("i1", "code_i", "YES")]}).json()
    assert "circuit open" in r["results"][0]["detail"] and _Verifier.calls == before
    time.sleep(0.6)  # half-open: one call goes through and, succeeding, closes the breaker
    _Verifier.mode = "ok"
    r = rest.post("/v1/check", headers=AUTH, json={"attempts": [_attempt("i1", "code_i", "YES")]}).json()
    assert r["results"][0]["outcome"] == "correct"

    assert rest.delete("/v1/verifiers/ext").status_code == 401
    assert rest.delete("/v1/verifiers/ext", headers=AUTH).status_code == 204
    assert rest.delete("/v1/verifiers/ext", headers=AUTH).status_code == 404
    assert rest.get("/v1/verifiers", headers=AUTH).json() == []
    spec = rest.get("/openapi.json").json()
    assert "callbacks" in json.dumps(spec["paths"]["/v1/verifiers"]["post"])


def test_grpc_round_trip(service):
    with served(service) as client:
        ex = client.Execute(sandbox_pb2.ExecuteRequest(jobs=[
            sandbox_pb2.ExecJob(job_id="j", program="def f(a):\n    return {a: (a,)}", call="f(2)")]))
        assert (ex.results[0].status, ex.results[0].value_repr) == ("ok", "{2: (2,)}")
        v = client.ValidateProposals(sandbox_pb2.ValidateProposalsRequest(proposals=[
            sandbox_pb2.Proposal(proposal_id="p", task_type="code_o", teacher_id="T0", response_text=(
                "<answer>```python\ndef f(a):\n    return a[::-1]\n```\n```input\n'abc'\n```</answer>")),
            sandbox_pb2.Proposal(proposal_id="q", task_type="code_o", response_text="nothing")]))
        assert [(r.valid, r.reason) for r in v.results] == [(True, "ok"), (False, "no_answer")]
        task = Triplet.from_pb(v.results[0].task)
        assert task.outputs == ["'cba'"] and task.teacher_id == "T0" and task.complexity["lines_of_code"] == 2
        c = client.CheckAnswers(sandbox_pb2.CheckAnswersRequest(attempts=[
            sandbox_pb2.Attempt(attempt_id="a", task=v.results[0].task,
                                response_text="<think>t</think><answer>'cba'</answer>")]))
        assert (c.results[0].outcome, c.results[0].verifier) == ("correct", "sandbox")
        with pytest.raises(ServiceError) as e:
            client.Execute(sandbox_pb2.ExecuteRequest(jobs=[sandbox_pb2.ExecJob(program="1", timeout_s=1e6)]))
        assert "timeout_s" in e.value.message
        with pytest.raises(ServiceError) as e:
            client.CheckAnswers(sandbox_pb2.CheckAnswersRequest(attempts=[sandbox_pb2.Attempt(attempt_id="x")]))
        assert "task_type" in e.value.message
        assert service.Execute(sandbox_pb2.ExecuteRequest(jobs=[sandbox_pb2.ExecJob(program="", call="1+1")])
                               ).results[0].value_repr == "2"


def test_grpc_math_w_round_trip(service):
    """math_w (spec 18) through the service: validated in the sandbox, its answers judged by the service's math
    checker, whose workers start at the first math_w request only."""
    with served(service) as client:
        client.ValidateProposals(sandbox_pb2.ValidateProposalsRequest(proposals=[
            sandbox_pb2.Proposal(proposal_id="c", task_type="code_o", response_text="nothing")]))
        assert service._math is None  # a code type's request starts no math checker
        v = client.ValidateProposals(sandbox_pb2.ValidateProposalsRequest(proposals=[
            sandbox_pb2.Proposal(proposal_id="m", task_type="math_w", teacher_id="T0", response_text=(
                "<answer>```problem\nA box holds 6 rows of 4 eggs. How many eggs are in the box?\n```\n"
                "```python\ndef eggs():\n    return 6 * 4\n```</answer>")),
            sandbox_pb2.Proposal(proposal_id="n", task_type="math_w", response_text=(
                "<answer>```problem\nSix rows of 4 eggs make 24 eggs. How many eggs?\n```\n"
                "```python\ndef solution():\n    return 6 * 4\n```</answer>"))]))
        assert [(r.valid, r.reason) for r in v.results] == [(True, "ok"), (False, "answer_in_problem")]
        task = Triplet.from_pb(v.results[0].task)
        assert (task.outputs, task.inputs, task.program.startswith("def solution():")) == (["24"], [], True)
        c = client.CheckAnswers(sandbox_pb2.CheckAnswersRequest(attempts=[
            sandbox_pb2.Attempt(attempt_id=a, task=v.results[0].task, response_text=text)
            for a, text in (("right", "6 * 4 = 24, so \\boxed{24}"), ("wrong", "\\boxed{20}"), ("none", "24"))]))
        assert [(r.attempt_id, r.outcome, r.verifier) for r in c.results] == [
            ("right", "correct", "sandbox"), ("wrong", "wrong", "sandbox"), ("none", "malformed", "sandbox")]
        assert c.jobs == 0  # nothing of a math answer is run
    service.math_checker().close()
