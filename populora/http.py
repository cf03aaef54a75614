"""What the REST apps share: the status code of each service error; the Guard that names each request's caller (its
client certificate over HTTPS, else its bearer token: the same identities, scopes and verifiers as gRPC,
populora.access) and holds it to the operation its route runs before the body is read, with that credential declared
in the OpenAPI documents as their security scheme; the id fields of populora.names' rule; the refusal of JSON
booleans where a number is expected; and a 405 whose Allow header names every method of the path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import grpc
from fastapi import Depends, FastAPI, Request, Security
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, BeforeValidator, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from populora import names
from populora.access import EVERY, Access, Refused, scope_on
from populora.contracts import CONTRACTS
from populora.scopes import rest_allowed, rest_kind
from populora.service_errors import ServiceError
from populora.tls import PEER_IDENTITY

HTTP_STATUS = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.NOT_FOUND: 404,
               grpc.StatusCode.FAILED_PRECONDITION: 409, grpc.StatusCode.ALREADY_EXISTS: 409,
               grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
               grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.PERMISSION_DENIED: 403,
               grpc.StatusCode.UNAVAILABLE: 503}


def http_status(e: ServiceError) -> int:
    return HTTP_STATUS.get(e.code, 500)


def error_response(e: ServiceError, detail: str) -> JSONResponse:
    """A service error as REST answers it; a 401 names the scheme it wants (RFC 9110, WWW-Authenticate)."""
    status = http_status(e)
    headers = {"WWW-Authenticate": 'Bearer realm="populora"'} if status == 401 else None
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


# The one security scheme of every REST app: what the OpenAPI documents declare on every operation that needs it.
BEARER = HTTPBearer(scheme_name="bearerToken", auto_error=False,
                    description="The caller's own token (`populora token`; the server keeps only its verifier, "
                                "`services.tokens_path`), sent as `Authorization: Bearer <token>`: the same tokens as "
                                "gRPC. Over HTTPS a client certificate of the deployment's CA names the caller instead "
                                "(its identity, as over gRPC). A development server on one machine may take its "
                                "`services.token` for every operation. An operation outside the caller's scope is 403.")
IDENTITY = "populora.identity"  # the request scope's key for the caller's identity, once the Guard checked it
OPEN_PATHS = frozenset({"/healthz", "/"})  # open to anyone (health checks, the dashboard page's own HTML)


def requirement(service: str, operation: str) -> Callable[..., str]:
    """A FastAPI dependency that names the operation a route runs: a gRPC method of `service` (the league's POST
    /v1/runs runs CreateRun) or one of populora.scopes.REST_OPERATIONS (`Read`, the verifier registry's). The Guard
    checks the caller against it before the request's body is read; the dependency, run afterwards, answers the
    identity the Guard found, and refuses a request the Guard did not check (an app without one). It declares the
    bearer scheme in the OpenAPI document."""

    def checked(request: Request,
                _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)]) -> str:
        found = request.scope.get(IDENTITY)
        if found is None or found[1:] != (service, operation):
            raise ServiceError(grpc.StatusCode.PERMISSION_DENIED,
                               f"{service}.{operation}: no credential was checked for this request")
        return found[0]

    checked.populora_operation = (service, operation)  # type: ignore[attr-defined]
    return checked


def guarded_get(app: FastAPI, service: str, operation: str, refusals: dict) -> Callable[..., Callable]:
    """`app.get`, with every route it adds held to `service`.`operation` (its requirement) and documenting
    `refusals` (the app's 401 and 403 entries) beside its own responses."""

    def get(path: str, **kwargs: Any) -> Callable:
        kwargs["dependencies"] = [*kwargs.get("dependencies", ()), Depends(requirement(service, operation))]
        kwargs["responses"] = {**refusals, **kwargs.get("responses", {})}
        return app.get(path, **kwargs)

    return get


def _refusal(status: int, detail: str) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="populora"'} if status == 401 else None
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


class Guard:
    """ASGI middleware: each request to a route of the app is checked against the operation the route runs (its
    `requirement`; a route without one is the service's `Read` for GET and HEAD, and open to no one otherwise) before
    anything of the request's body is read, so a request without a credential is 401 and one outside its caller's
    scope 403, whatever its body. The caller is the identity its client certificate names (HTTPS, where uvicorn runs
    with populora.tls.uvicorn_ssl), else the one its bearer token's verifier names; a server's `services.token` opens
    every operation. Reads (`Read`) need no credential only where the server takes none for them: plaintext and no
    scoped tokens (populora.access.Access.open_reads). OPEN_PATHS, the OpenAPI document and static files are open."""

    def __init__(self, app, router, access: Access, service: str):
        self.app, self.router, self.access, self.service = app, router, access, service

    def _operation(self, scope) -> tuple[str, str] | None:
        """(service, operation) of the route `scope` reaches; None where the request is open (or reaches nothing:
        the router's 404 or 405 answers it)."""
        for route in self.router.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                if not isinstance(route, APIRoute) or route.path in OPEN_PATHS:
                    return None
                for dep in route.dependant.dependencies:
                    needed = getattr(dep.call, "populora_operation", None)
                    if needed is not None:
                        return needed
                return (self.service, "Read") if scope["method"] in ("GET", "HEAD") else (self.service, "")
        return None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        needed = self._operation(scope)
        if needed is None:
            await self.app(scope, receive, send)
            return
        refused = self.check(scope, *needed)
        if refused is not None:
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def check(self, scope, service: str, operation: str) -> JSONResponse | None:
        """None when the caller may run `operation` (its identity then in scope[IDENTITY]); the refusal otherwise."""
        authorization = ""
        for key, value in scope.get("headers") or ():
            if key == b"authorization":
                authorization = value.decode("latin-1")
        name = f"{CONTRACTS[service].name}.{operation}"
        if not operation:
            return _refusal(403, f"{scope['method']} {scope['path']} is open to no identity")
        access = self.access
        if operation != "Read" and not access.takes_credentials():
            return _refusal(403, f"{name} is disabled: this server takes no credential (no TLS, no scoped token "
                                 "verifiers, no token); give it services.tokens_path (`populora token`) or turn on "
                                 "services.tls")
        try:
            identity = access.identity(authorization, scope.get(PEER_IDENTITY, ""), read_only=operation == "Read")
        except Refused as e:
            return _refusal(401, f"{name}: {e.message}")
        kind = rest_kind(service, operation)
        if identity not in (EVERY, "") and not rest_allowed(identity, service, operation):
            return _refusal(403, f"{identity} may not call {name} (a {kind}); on {service} it may call: "
                                 f"{scope_on(identity, service)}")
        scope[IDENTITY] = (identity, service, operation)
        return None


def guard(app: FastAPI, access: Access, service: str) -> None:
    """Check every request of `app` (a REST app of `service`) with a Guard over `access`. Where reads are open
    (`access.open_reads`), the OpenAPI document says so: a read's credential is optional there (an empty security
    requirement beside the bearer scheme), as the Guard lets it through without one."""
    app.add_middleware(Guard, router=app.router, access=access, service=service)
    if not access.open_reads:
        return
    reads = {(route.path, method.lower()) for route in app.router.routes if isinstance(route, APIRoute)
             for method in route.methods if method in ("GET", "HEAD") and route.path not in OPEN_PATHS
             and all(getattr(d.call, "populora_operation", (service, "Read"))[1] == "Read"
                     for d in route.dependant.dependencies if hasattr(d.call, "populora_operation"))}
    made = app.openapi

    def document() -> dict:
        if app.openapi_schema is None:
            schema = made()
            for path, methods in schema.get("paths", {}).items():
                for method, operation in methods.items():
                    if (path, method) in reads and operation.get("security"):
                        operation["security"] = [{}, *operation["security"]]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = document


def Name(max_length: int, param: Callable[..., Any] = Field, optional: bool = False, **extra: Any):  # noqa: N802
    """A run id (names.MAX_RUN_ID) or adapter id (names.MAX_ADAPTER_ID) field of a body (`Field`), path (`Path`) or
    query (`Query`): the OpenAPI document publishes the rule as a pattern, and an id that breaks it is a 422 that
    says why. `optional`: "" is allowed too (none, any)."""
    pattern = names.pattern(max_length)
    if optional:
        pattern = f"^(?:{pattern[1:-1]})?$"

    def check(value: str) -> str:
        why = "" if optional and value == "" else names.reason(value, max_length)
        if why:
            raise ValueError(why)
        return value

    info = param(min_length=0 if optional else 1, max_length=max_length, json_schema_extra={"pattern": pattern},
                 **extra)
    return Annotated[str, info, AfterValidator(check)]


def _not_bool(value: object) -> object:
    """JSON true/false is not a number here (pydantic would read it as 1/0)."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


# Annotated[int, Field(...), Number]: an integer or number field that refuses true/false
Number = BeforeValidator(_not_bool)


def answer_http_errors(app: FastAPI) -> None:
    """Starlette's own errors (404 of an unknown path, 405, ...) as {"detail": ...}; a 405's Allow header names every
    method the path answers, not only those of the first route that matched it."""

    @app.exception_handler(StarletteHTTPException)
    def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        headers = dict(e.headers or {})
        if e.status_code == 405:
            methods = {m for r in app.router.routes if isinstance(r, APIRoute)
                       and r.matches(request.scope)[0] != Match.NONE for m in r.methods}
            headers["Allow"] = ", ".join(sorted(methods))
        return JSONResponse({"detail": e.detail}, status_code=e.status_code, headers=headers)
