"""The sandbox's REST API (FastAPI, OpenAPI at /docs): run jobs, check answers, and register external
verifiers. Every operation but /healthz needs its caller's credential, checked before the body is read (populora.http's
Guard: a client certificate over HTTPS, else `Authorization: Bearer <token>`, the OpenAPI security scheme
`bearerToken`): running and checking as the gRPC methods they run (Execute, CheckAnswers), the verifier registry as
populora.scopes.REST_OPERATIONS' RegisterVerifier, ListVerifiers (its URLs may be internal addresses or carry a key)
and DeleteVerifier, /metrics as the sandbox's `Read`.

Every field is bounded and validated here, at the edge: text must be valid UTF-8 (no lone surrogates) and of
bounded length, identifiers hold no control characters (NUL included), an adapter id follows populora.names, numbers
are numbers (not true/false) and stay in range. A request this app cannot serve gets a 4xx naming the field (a 405 names every method of the path in
its Allow header); every status an endpoint returns is in its OpenAPI entry.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

import grpc
from fastapi import APIRouter, Depends, FastAPI, Path, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from sqlalchemy.exc import SQLAlchemyError

from populora import names
from populora.access import Access
from populora.http import Name, Number, answer_http_errors, error_response, guard, requirement
from populora.metrics import generate_latest
from populora.rpc import ServiceError
from populora.tasks.triplet import Triplet
from populora.tasks.verify import Attempt
from services.sandbox.registry import NAME_PATTERN, URL_PATTERN, RegistryError
from services.sandbox.service import (
    MAX_BATCH,
    MAX_MEMORY_MB,
    MAX_TIMEOUT_S,
    SandboxService,
    _check_batch,
    plain_text,
)

TaskType = Literal["code_i", "code_o", "code_f"]
MAX_PROGRAM = 1_000_000
MAX_TEXT = 100_000
MAX_ITEMS = 1_000


def _utf8(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid UTF-8 text (no lone surrogates)") from None
    return text


def Text(max_length: int, description: str = ""):  # noqa: N802 - a type alias with parameters
    """Free text: valid UTF-8, at most `max_length` characters (NUL allowed: it is data, never an identifier)."""
    return Annotated[str, Field(max_length=max_length, description=description), AfterValidator(_utf8)]


# an identifier echoed back or logged: printable, bounded
Ident = Annotated[str, Field(max_length=256, pattern=r"^[^\x00-\x1f\x7f]*$"), AfterValidator(_utf8)]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorOut(Model):
    detail: str


class ValidationIssue(Model):
    loc: list[str | int]
    msg: str
    type: str


class ValidationOut(Model):
    detail: list[ValidationIssue]


def _errors(*codes: int) -> dict:
    """OpenAPI entries of the error statuses a route returns."""
    text = {400: "the body cannot be read (not UTF-8 JSON), or it is well-formed but not valid (the message says "
                 "which field)",
            401: "no credential this server takes (a client certificate over HTTPS, or `Authorization: Bearer <token>`); "
                 "checked before the body is read",
            403: "the caller's identity may not call this operation (the message names what it may call on the "
                 "sandbox), or the server takes no credential",
            404: "no such verifier", 409: "this sandbox has no verifier registry",
            422: "a field is missing, of the wrong type or out of bounds (`detail[].loc` names it)",
            429: f"more than {MAX_BATCH} items in one request", 503: "the registry's database is unavailable"}
    return {c: {"model": ValidationOut if c == 422 else ErrorOut, "description": text[c]} for c in codes}


class ExecJobIn(Model):
    job_id: Ident = ""
    program: Text(MAX_PROGRAM, "Python source")
    call: Text(MAX_TEXT, "expression evaluated after the program, e.g. f(1, 2)") = ""
    timeout_s: Annotated[float, Field(ge=0, le=MAX_TIMEOUT_S, description="0 = the server's default"), Number] = 0.0
    memory_mb: Annotated[int, Field(ge=0, le=MAX_MEMORY_MB, description="0 = the server's default"), Number] = 0


class ExecuteIn(Model):
    jobs: list[ExecJobIn] = Field(description=f"at most {MAX_BATCH} (429 beyond)")


class ExecResultOut(Model):
    job_id: str
    status: Literal["ok", "timeout", "memory", "output_limit", "error", "killed", "sandbox_error"]
    value_repr: str
    stdout: str
    error: str
    seconds: float
    cpu_seconds: float  # user + system CPU time of the job's process


class ExecuteOut(Model):
    results: list[ExecResultOut]


class TaskIn(Model):
    task_id: Ident = ""
    task_type: TaskType
    program: Text(MAX_PROGRAM)
    inputs: list[Text(MAX_TEXT)] = Field(min_length=1, max_length=MAX_ITEMS)
    outputs: list[Text(MAX_TEXT)] = Field(min_length=1, max_length=MAX_ITEMS,
                                          description="gold output reprs, one per input")
    message: Text(MAX_TEXT) = ""
    teacher_id: Name(names.MAX_ADAPTER_ID, optional=True, description="the adapter that proposed it (empty: none)"
                     ) = ""


class AttemptIn(Model):
    attempt_id: Ident
    task: TaskIn
    response_text: Text(MAX_PROGRAM)


class CheckIn(Model):
    attempts: list[AttemptIn] = Field(description=f"at most {MAX_BATCH} (429 beyond)")


class CheckOut(Model):
    attempt_id: str
    outcome: Literal["correct", "wrong", "malformed", "verifier_error"]
    detail: str = ""
    verifier: str = "sandbox"


class CheckResponse(Model):
    results: list[CheckOut]


class VerifierIn(Model):
    name: str = Field(pattern=NAME_PATTERN)
    url: str = Field(pattern=URL_PATTERN, description="the endpoint that receives the contract's POST")
    task_types: list[TaskType] = Field(min_length=1, max_length=3)


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


def create_app(service: SandboxService, access: Access | None = None) -> FastAPI:
    """The REST app over a SandboxService (served beside the gRPC server by `serve`, or alone by uvicorn). `access`
    (default: the service's token alone, plaintext) names each caller, which must be one that may call Execute or
    CheckAnswers to run or check, and RegisterVerifier, ListVerifiers or DeleteVerifier for the registry
    (populora.scopes)."""
    app = FastAPI(title="PopuLoRA sandbox", version="1",
                  description="Isolated execution of untrusted Python, AZR answer checking, external verifiers.")

    answer_http_errors(app)

    @app.exception_handler(ServiceError)
    def _service_error(_request: Request, e: ServiceError) -> JSONResponse:
        return error_response(e, plain_text(e.message))

    @app.exception_handler(RegistryError)
    def _registry_error(_request: Request, e: RegistryError) -> JSONResponse:
        return JSONResponse({"detail": [{"loc": ["body", e.field], "msg": plain_text(e.message),
                                         "type": "value_error"}]}, status_code=422)

    @app.exception_handler(SQLAlchemyError)
    def _database_error(_request: Request, e: SQLAlchemyError) -> JSONResponse:
        if getattr(getattr(e, "orig", None), "sqlstate", "") == "42501":  # the database refused this role the write
            return JSONResponse({"detail": "this sandbox's database role may only read the verifier registry (as in "
                                           "the shipped deployments: python -m coordinator.pgroles); register or remove "
                                           "verifiers with `populora verifiers`, as the database's owner"},
                                status_code=409)
        return JSONResponse({"detail": f"the verifier registry's database is unavailable ({type(e).__name__}); "
                                       "try again once it is back (registering or deleting again is safe)"},
                            status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(RequestValidationError)
    def _invalid(_request: Request, e: RequestValidationError) -> Response:
        # what was sent is not echoed back: it may be huge, hold lone surrogates or be NaN, none of which this
        # response could carry as JSON
        issues = [{"loc": [str(x) if not isinstance(x, int) else x for x in err.get("loc", ())],
                   "msg": plain_text(str(err.get("msg", ""))), "type": str(err.get("type", ""))}
                  for err in e.errors()]
        return Response(json.dumps(jsonable_encoder({"detail": issues})), status_code=422,
                        media_type="application/json")

    def may(operation: str) -> list:
        return [Depends(requirement("sandbox", operation))]

    def registry():
        if service.registry is None:
            raise ServiceError(grpc.StatusCode.FAILED_PRECONDITION, "this sandbox has no verifier registry "
                                                                    "(sandbox.db_url / league.db_url)")
        return service.registry

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict:
        return {"status": "ok", "backend": service.executor.name, "isolation": service.executor.isolation()}

    @app.get("/metrics", tags=["ops"], response_class=Response, dependencies=may("Read"),
             responses=_errors(401, 403))
    def metrics() -> Response:
        return Response(generate_latest(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/execute", tags=["run"], response_model=ExecuteOut, dependencies=may("Execute"),
              responses=_errors(400, 401, 403, 422, 429))
    def execute(body: ExecuteIn) -> ExecuteOut:
        """Run programs in the sandbox; one result per job, in order."""
        from populora.pb import sandbox_pb2

        req = sandbox_pb2.ExecuteRequest(jobs=[sandbox_pb2.ExecJob(**j.model_dump()) for j in body.jobs])
        res = service.Execute(req)
        return ExecuteOut(results=[ExecResultOut(job_id=r.job_id, status=r.status, value_repr=r.value_repr,
                                                 stdout=r.stdout, error=r.error, seconds=r.seconds,
                                                 cpu_seconds=r.cpu_seconds)
                                   for r in res.results])

    @app.post("/v1/check", tags=["run"], response_model=CheckResponse, dependencies=may("CheckAnswers"),
              responses=_errors(400, 401, 403, 422, 429))
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
        return CheckResponse(results=[CheckOut(attempt_id=c.attempt_id, outcome=c.outcome,
                                               detail=plain_text(c.detail), verifier=c.verifier)
                                      for c in service.check(attempts)])

    @app.post("/v1/verifiers", tags=["verifiers"], status_code=201, response_model=VerifierOut,
              dependencies=may("RegisterVerifier"), callbacks=contract.routes,
              responses=_errors(400, 401, 403, 409, 422, 503))
    def register(body: VerifierIn) -> VerifierOut:
        """Register (or replace) an external verifier; `sandbox.verifiers` in the run's config routes a task
        type to it by name."""
        rec = registry().register(body.name, body.url, list(body.task_types))
        return VerifierOut(**rec.to_dict())

    @app.get("/v1/verifiers", tags=["verifiers"], response_model=list[VerifierOut],
             dependencies=may("ListVerifiers"), responses=_errors(401, 403, 409, 503))
    def list_verifiers() -> list[VerifierOut]:
        """The registered verifiers. Their URLs may be addresses inside the cluster or carry a key, so the list needs
        the credential, as registering does."""
        return [VerifierOut(**r.to_dict()) for r in registry().list()]

    @app.delete("/v1/verifiers/{name}", tags=["verifiers"], status_code=204,
                dependencies=may("DeleteVerifier"), responses=_errors(401, 403, 404, 409, 422, 503))
    def delete(name: Annotated[str, Path(pattern=NAME_PATTERN)]) -> Response:
        if not registry().delete(name):
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"no verifier named {name!r}; GET /v1/verifiers "
                                                          "lists them")
        return Response(status_code=204)

    guard(app, access if access is not None else Access(service.token), "sandbox")
    return app
