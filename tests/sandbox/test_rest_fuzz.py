"""Schema fuzzing of the sandbox's REST API with schemathesis, against the real app served by uvicorn, its jobs
run by the real zygote and its verifier registry on the real Postgres: requests generated from the OpenAPI schema
(valid and invalid ones, the token included) never get a server error, and every status that comes back is one
the schema documents, with a body of the documented shape."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, response_schema_conformance, status_code_conformance

from populora.config import SandboxConfig, TasksConfig
from services.sandbox.external import ExternalVerifiers
from services.sandbox.registry import VerifierRegistry
from services.sandbox.rest import create_app
from services.sandbox.service import SandboxService
from tests.sandbox.conftest import serve_rest

TOKEN = "fuzz-token"
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
EXAMPLES = 100  # per operation and generation mode: about a minute for the whole schema on this machine
# operations that take nothing at all: there is no invalid request to make of them
NO_INPUT = {"GET /healthz", "GET /metrics", "GET /v1/verifiers"}


@pytest.fixture
def sandbox_api(zygote, pg_url):
    registry = VerifierRegistry(pg_url)
    service = SandboxService(zygote, TasksConfig(timeout_s=0.5), SandboxConfig(), registry,
                             ExternalVerifiers(0.5, 0, 2, 0.5), token=TOKEN)
    try:
        with serve_rest(create_app(service)) as url:
            yield schemathesis.openapi.from_url(url + "/openapi.json")
    finally:
        service.external.close()
        registry.close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_error_and_no_undocumented_status(sandbox_api, mode):
    operations = [result.ok() for result in sandbox_api.get_all_operations()]
    assert {op.label for op in operations} >= {"POST /v1/execute", "POST /v1/check", "POST /v1/verifiers",
                                              "GET /v1/verifiers", "DELETE /v1/verifiers/{name}"}
    unsatisfiable = set()
    for operation in operations:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def call(case):
            case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=CHECKS)

        try:
            call()
        except Unsatisfiable:
            unsatisfiable.add(operation.label)
    assert unsatisfiable <= (NO_INPUT if mode == GenerationMode.NEGATIVE else set()), unsatisfiable


@pytest.fixture
def sandbox_url(zygote, pg_url):
    registry = VerifierRegistry(pg_url)
    service = SandboxService(zygote, TasksConfig(timeout_s=0.5), SandboxConfig(), registry, token=TOKEN)
    try:
        with serve_rest(create_app(service)) as url:
            yield url
    finally:
        service.external.close()
        registry.close()


def _task(**over) -> dict:
    task = {"task_type": "code_f", "program": "def f(a):\n    return a", "inputs": ["1", "2"], "outputs": ["1", "2"]}
    return {**task, **over}


def _check(attempt_id: str = "a", text: str = "<think>t</think><answer>1</answer>", **task) -> dict:
    return {"attempts": [{"attempt_id": attempt_id, "response_text": text, "task": _task(**task)}]}


HOSTILE_REQUESTS = [
    # (method, path, raw JSON body or None, the statuses allowed)
    ("POST", "/v1/verifiers", '{"name": "a\\u0000b", "url": "http://x", "task_types": ["code_i"]}', {422}),
    ("POST", "/v1/verifiers", '{"name": "ok", "url": "http://x\\u0000y", "task_types": ["code_i"]}', {422}),
    ("POST", "/v1/verifiers", '{"name": "ok", "url": "http://x/\\ud800", "task_types": ["code_i"]}', {422}),
    ("POST", "/v1/verifiers", '{"name": "ok", "url": "http://' + "x" * 5000 + '", "task_types": ["code_i"]}',
     {422}),
    ("DELETE", "/v1/verifiers/a%00b", None, {422}),
    ("DELETE", "/v1/verifiers/" + "n" * 300, None, {422}),
    ("POST", "/v1/execute", '{"jobs": [{"program": "1", "memory_mb": ' + "9" * 400 + "}]}", {422}),
    ("POST", "/v1/execute", '{"jobs": [{"program": "1", "timeout_s": NaN}]}', {422}),
    ("POST", "/v1/execute", '{"jobs": [{"program": "1", "timeout_s": 1e999}]}', {422}),
    ("POST", "/v1/execute", '{"jobs": [{"program": "x = \\"\\ud800\\""}]}', {422}),
    ("POST", "/v1/execute", '{"jobs": [{"program": "1", "job_id": "a\\u0000"}]}', {422}),
    ("POST", "/v1/execute", '{"jobs": [{"program": "' + "x" * 1_000_001 + '"}]}', {422}),
    ("POST", "/v1/execute", '{"jobs": [{"program": 5}]}', {422}),
    ("POST", "/v1/execute", '{"jobs": "all"}', {422}),
    ("POST", "/v1/execute", '{"jobs": [', {422}),
    ("POST", "/v1/check", '{"attempts": [{"attempt_id": "a", "response_text": "x", "task": {"task_type": "code_z",'
     ' "program": "", "inputs": ["1"], "outputs": ["1"]}}]}', {422}),
]


@pytest.mark.parametrize("method, path, body, allowed", HOSTILE_REQUESTS,
                         ids=[f"{m} {p[:30]} {(b or '')[:40]}" for m, p, b, _ in HOSTILE_REQUESTS])
def test_hostile_requests_get_a_4xx(sandbox_url, method, path, body, allowed):
    import httpx

    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    r = httpx.request(method, sandbox_url + path, content=body, headers=headers, timeout=30)
    assert r.status_code in allowed, (r.status_code, r.text[:300])
    assert r.json()["detail"]


@pytest.mark.parametrize("field", ["timeout_s", "memory_mb"])
def test_a_boolean_is_not_a_number(sandbox_url, field):
    """JSON true/false in a number field is refused naming the field (pydantic alone reads them as 1/0); a number
    there, an integer one included, is taken."""
    import httpx

    headers = {"Authorization": f"Bearer {TOKEN}"}
    for value in (True, False):
        r = httpx.post(sandbox_url + "/v1/execute", headers=headers, timeout=30,
                       json={"jobs": [{"job_id": "j", "program": "x = 1", "call": "x", field: value}]})
        assert r.status_code == 422, (value, r.text[:300])
        assert [(d["loc"], d["msg"]) for d in r.json()["detail"]] == [
            (["body", "jobs", 0, field], "Value error, must be a number, not a boolean")], r.text[:300]
    r = httpx.post(sandbox_url + "/v1/execute", headers=headers, timeout=30,
                   json={"jobs": [{"job_id": "j", "program": "x = 1", "call": "x", field: 1}]})
    assert r.status_code == 200 and r.json()["results"][0]["value_repr"] == "1", r.text[:300]


def test_a_405_names_every_method_of_the_path(sandbox_url):
    """OPTIONS (or any method a path does not serve) is 405 with an Allow header that lists every method the path
    serves, as its OpenAPI entry does, and changes nothing."""
    import httpx

    spec = httpx.get(sandbox_url + "/openapi.json", timeout=30).json()["paths"]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    for method, path, route in (("OPTIONS", "/v1/verifiers", "/v1/verifiers"),
                                ("PUT", "/v1/verifiers", "/v1/verifiers"),
                                ("OPTIONS", "/v1/verifiers/v1", "/v1/verifiers/{name}"),
                                ("GET", "/v1/execute", "/v1/execute")):
        r = httpx.request(method, sandbox_url + path, headers=headers, timeout=30)
        assert r.status_code == 405 and r.json()["detail"], (method, path, r.text[:300])
        assert sorted(r.headers["allow"].split(", ")) == sorted(m.upper() for m in spec[route]), \
            (method, path, r.headers["allow"])
    assert httpx.get(sandbox_url + "/v1/verifiers", headers=headers, timeout=30).json() == []


def test_hostile_content_gets_an_answer_not_a_crash(sandbox_url):
    """Valid requests whose content is hostile: a job that raises with a lone surrogate in its message, a
    program nested too deeply to rewrite, gold that is not a literal, a gold NUL string."""
    import httpx

    headers = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(sandbox_url + "/v1/execute", headers=headers, timeout=30,
                   json={"jobs": [{"program": "raise ValueError(chr(0xdc80))"}]})
    assert r.status_code == 200 and r.json()["results"][0]["status"] == "error"
    assert "\\udc80" in r.json()["results"][0]["error"]
    deep = "def g(a):\n    return " + "+".join(["a"] * 600)
    identity = "<think>t</think><answer>```python\ndef g(a):\n    return a\n```</answer>"
    cases = [_check("deep", f"<think>t</think><answer>```python\n{deep}\n```</answer>"),
             _check("gold", identity, outputs=["1", "__import__('os')"]),
             _check("nul", identity, outputs=["'\\x00'", "'\\x00'"], inputs=["'\\x00'", "'\x00'"])]
    outcomes = []
    for body in cases:
        r = httpx.post(sandbox_url + "/v1/check", headers=headers, json=body, timeout=30)
        assert r.status_code == 200, r.text[:300]
        outcomes.append(r.json()["results"][0]["outcome"])
    assert outcomes == ["malformed", "verifier_error", "wrong"]
