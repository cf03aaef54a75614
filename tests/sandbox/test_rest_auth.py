"""Who may do what on the sandbox's REST API, against the real app on uvicorn with its registry on Postgres: the
OpenAPI document declares the bearer scheme on every operation that needs it; the verifier list, whose URLs may be
internal addresses, is for holders of the token; a task's teacher_id follows the one rule of ids."""

from __future__ import annotations

import httpx
import pytest

from populora import names
from populora.config import SandboxConfig, TasksConfig
from services.sandbox.registry import VerifierRegistry
from services.sandbox.rest import create_app
from services.sandbox.service import SandboxService
from tests.sandbox.conftest import serve_rest

TOKEN = "auth-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
OPEN = {("get", "/healthz")}
READS = {("get", "/metrics")}  # the sandbox's Read: open only where the server takes no credential for it (this one)


def _serve(zygote, pg_url, token: str):
    registry = VerifierRegistry(pg_url)
    service = SandboxService(zygote, TasksConfig(timeout_s=0.5), SandboxConfig(), registry, token=token)
    return service, registry


@pytest.fixture
def sandbox(zygote, pg_url):
    service, registry = _serve(zygote, pg_url, TOKEN)
    try:
        with serve_rest(create_app(service)) as url, httpx.Client(base_url=url, timeout=30) as client:
            yield client
    finally:
        service.external.close()
        registry.close()


def test_openapi_declares_the_bearer_scheme_where_the_token_is_needed(sandbox):
    spec = sandbox.get("/openapi.json").json()
    scheme = spec["components"]["securitySchemes"]["bearerToken"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer") and "services.token" in scheme["description"]
    seen = set()
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            seen.add((method, path))
            if (method, path) in OPEN:
                assert "security" not in op, (method, path)
            elif (method, path) in READS:  # plaintext, no scoped tokens: the document says the credential is optional
                assert op["security"] == [{}, {"bearerToken": []}], (method, path)
                assert sandbox.get(path).status_code == 200, path  # and the server lets it through without one
            else:
                assert op["security"] == [{"bearerToken": []}], (method, path)
                assert {"401", "403"} <= set(op["responses"]), (method, path)
    assert ("get", "/v1/verifiers") in seen and OPEN | READS <= seen


def test_the_verifier_list_needs_the_token(sandbox):
    made = sandbox.post("/v1/verifiers", headers=AUTH, json={"name": "inside", "task_types": ["code_o"],
                                                             "url": "http://10.0.0.7:9000/check?key=abc"})
    assert made.status_code == 201, made.text
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        anonymous = sandbox.get("/v1/verifiers", headers=headers)
        assert anonymous.status_code == 401 and "10.0.0.7" not in anonymous.text, anonymous.text
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
    listed = sandbox.get("/v1/verifiers", headers=AUTH)
    assert listed.status_code == 200 and [v["url"] for v in listed.json()] == ["http://10.0.0.7:9000/check?key=abc"]
    assert sandbox.delete("/v1/verifiers/inside", headers=AUTH).status_code == 204
    assert sandbox.get("/healthz").status_code == 200  # still open


def test_a_server_without_a_token_lists_no_verifiers(zygote, pg_url):
    service, registry = _serve(zygote, pg_url, "")
    try:
        with serve_rest(create_app(service)) as url:
            resp = httpx.get(url + "/v1/verifiers", headers={"Authorization": "Bearer anything"}, timeout=30)
            assert resp.status_code == 403 and "token" in resp.json()["detail"]
    finally:
        service.external.close()
        registry.close()


@pytest.mark.parametrize("teacher_id", ["../T0", "a/b", "é", "T 0", ".."])
def test_a_task_teacher_id_follows_the_rule_of_ids(sandbox, teacher_id):
    task = {"task_type": "code_f", "program": "def f(a):\n    return a", "inputs": ["1"], "outputs": ["1"],
            "teacher_id": teacher_id}
    resp = sandbox.post("/v1/check", headers=AUTH, json={"attempts": [
        {"attempt_id": "a", "task": task, "response_text": "<answer>1</answer>"}]})
    assert resp.status_code == 422, resp.text
    issue = resp.json()["detail"][0]
    assert issue["loc"] == ["body", "attempts", 0, "task", "teacher_id"] and names.RULE in issue["msg"]
