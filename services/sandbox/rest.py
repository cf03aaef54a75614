"""The sandbox's REST API (FastAPI, OpenAPI at /docs): run jobs, check answers, and register external
verifiers. Every POST and DELETE needs `Authorization: Bearer <sandbox token>`; reads are open."""

from __future__ import annotations

import hmac
from typing import Literal

import grpc
from fastapi import APIRouter, Depends, FastAPI, Header, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from populora.metrics import generate_latest
from populora.rpc import ServiceError
from populora.tasks.triplet import Triplet
from populora.tasks.verify import Attempt
from services.sandbox.registry import RegistryError
from services.sandbox.service import MAX_MEMORY_MB, MAX_TIMEOUT_S, SandboxService, _check_batch

HTTP_STATUS = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.NOT_FOUND: 404,
               grpc.StatusCode.FAILED_PRECONDITION: 409, grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
               grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.PERMISSION_DENIED: 403}
TaskType = Literal["code_i", "code_o", "code_f"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExecJobIn(Model):
    job_id: str = ""
    program: str = Field(max_length=1_000_000, description="Python source")
    call: str = Field("", max_length=100_000, description="expression evaluated after the program, e.g. f(1, 2)")
    timeout_s: float = Field(0.0, ge=0, le=MAX_TIMEOUT_S, description="0 = the server's default")
    memory_mb: int = Field(0, ge=0, le=MAX_MEMORY_MB, description="0 = the server's default")


class ExecuteIn(Model):
    jobs: list[ExecJobIn]


class ExecResultOut(Model):
    job_id: str
    status: Literal["ok", "timeout", "memory", "output_limit", "error", "killed", "sandbox_error"]
    value_repr: str
    stdout: str
    error: str
    seconds: float


class ExecuteOut(Model):
    results: list[ExecResultOut]


class TaskIn(Model):
    task_id: str = ""
    task_type: TaskType
    program: str
    inputs: list[str] = Field(min_length=1)
    outputs: list[str] = Field(min_length=1, description="gold output reprs, one per input")
    message: str = ""
    teacher_id: str = ""


class AttemptIn(Model):
    attempt_id: str
    task: TaskIn
    response_text: str


class CheckIn(Model):
    attempts: list[AttemptIn]


class CheckOut(Model):
    attempt_id: str
    outcome: Literal["correct", "wrong", "malformed", "verifier_error"]
    detail: str = ""
    verifier: str = "sandbox"


class CheckResponse(Model):
    results: list[CheckOut]


class VerifierIn(Model):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    url: str = Field(pattern=r"^https?://\S+$", description="the endpoint that receives the contract's POST")
    task_types: list[TaskType] = Field(min_length=1)


class VerifierOut(Model):
    name: str
    url: str
    task_types: list[str]
    created_at: float


# The external-verifier contract, documented as the callback of POST /v1/verifiers.
class ExternalAttempt(Model):
    attempt_id: str
    task: TaskIn
    response_text: str = Field(description="the student's raw output")


class ExternalRequest(Model):
    task_type: TaskType
    attempts: list[ExternalAttempt]


class ExternalResult(Model):
    attempt_id: str
    outcome: Literal["correct", "wrong", "malformed"]
    detail: str = ""


class ExternalResponse(Model):
    results: list[ExternalResult] = Field(description="one per attempt sent; anything else is verifier_error")


contract = APIRouter()


@contract.post("{$request.body#/url}", response_model=ExternalResponse,
               summary="What the sandbox sends to a registered verifier")
def external_verifier_contract(body: ExternalRequest) -> None:  # pragma: no cover - documentation only
    """The sandbox POSTs a batch of attempts of one task type and expects 200 with every attempt's outcome,
    within sandbox.verifier_timeout_s; it retries sandbox.verifier_retries times on timeouts, connection
    errors and 5xx, and opens a circuit breaker after sandbox.breaker_failures consecutive failures. A failure
    marks the attempts `verifier_error` (excluded from rewards)."""


def create_app(service: SandboxService) -> FastAPI:
    """The REST app over a SandboxService (served beside the gRPC server by `serve`, or alone by uvicorn)."""
    app = FastAPI(title="PopuLoRA sandbox", version="1",
                  description="Isolated execution of untrusted Python, AZR answer checking, external verifiers.")

    @app.exception_handler(ServiceError)
    def _service_error(_request: Request, e: ServiceError) -> JSONResponse:
        return JSONResponse({"detail": e.message}, status_code=HTTP_STATUS.get(e.code, 500))

    @app.exception_handler(RegistryError)
    def _registry_error(_request: Request, e: RegistryError) -> JSONResponse:
        return JSONResponse({"detail": [{"loc": ["body", e.field], "msg": e.message}]}, status_code=422)

    def require_token(authorization: str = Header("", description="Bearer <token>")) -> None:
        if not service.token:
            raise ServiceError(grpc.StatusCode.PERMISSION_DENIED,
                               "writes are disabled: set sandbox.token or $POPULORA_TOKEN on the server")
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), service.token.encode()):
            raise ServiceError(grpc.StatusCode.UNAUTHENTICATED,
                               "this endpoint needs the header 'Authorization: Bearer <sandbox token>'")

    def registry():
        if service.registry is None:
            raise ServiceError(grpc.StatusCode.FAILED_PRECONDITION, "this sandbox has no verifier registry "
                                                                    "(sandbox.db_url / league.db_url)")
        return service.registry

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict:
        return {"status": "ok", "backend": service.executor.name, "isolation": service.executor.isolation()}

    @app.get("/metrics", tags=["ops"], response_class=Response)
    def metrics() -> Response:
        return Response(generate_latest(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/execute", tags=["run"], response_model=ExecuteOut, dependencies=[Depends(require_token)])
    def execute(body: ExecuteIn) -> ExecuteOut:
        """Run programs in the sandbox; one result per job, in order."""
        from populora.pb import sandbox_pb2

        req = sandbox_pb2.ExecuteRequest(jobs=[sandbox_pb2.ExecJob(**j.model_dump()) for j in body.jobs])
        res = service.Execute(req)
        return ExecuteOut(results=[ExecResultOut(job_id=r.job_id, status=r.status, value_repr=r.value_repr,
                                                 stdout=r.stdout, error=r.error, seconds=r.seconds)
                                   for r in res.results])

    @app.post("/v1/check", tags=["run"], response_model=CheckResponse, dependencies=[Depends(require_token)])
    def check(body: CheckIn) -> CheckResponse:
        """Check student attempts (spec 2) in the sandbox or through the configured external verifier."""
        _check_batch(len(body.attempts), "attempts")
        attempts = []
        for k, a in enumerate(body.attempts):
            if len(a.task.inputs) != len(a.task.outputs):
                raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"attempts[{k}].task: {len(a.task.inputs)} inputs but {len(a.task.outputs)} "
                                   "outputs")
            attempts.append(Attempt(a.attempt_id, Triplet(**a.task.model_dump()), a.response_text))
        return CheckResponse(results=[CheckOut(attempt_id=c.attempt_id, outcome=c.outcome, detail=c.detail,
                                               verifier=c.verifier) for c in service.check(attempts)])

    @app.post("/v1/verifiers", tags=["verifiers"], status_code=201, response_model=VerifierOut,
              dependencies=[Depends(require_token)], callbacks=contract.routes)
    def register(body: VerifierIn) -> VerifierOut:
        """Register (or replace) an external verifier; `sandbox.verifiers` in the run's config routes a task
        type to it by name."""
        rec = registry().register(body.name, body.url, list(body.task_types))
        return VerifierOut(**rec.to_dict())

    @app.get("/v1/verifiers", tags=["verifiers"], response_model=list[VerifierOut])
    def list_verifiers() -> list[VerifierOut]:
        return [VerifierOut(**r.to_dict()) for r in registry().list()]

    @app.delete("/v1/verifiers/{name}", tags=["verifiers"], status_code=204,
                dependencies=[Depends(require_token)])
    def delete(name: str) -> Response:
        if not registry().delete(name):
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"no verifier named {name!r}; GET /v1/verifiers "
                                                          "lists them")
        return Response(status_code=204)

    return app
