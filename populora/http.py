"""What the REST apps of the league and the sandbox share: the status code of each service error, the bearer-token
dependency of the operations that need the credential (the same token as gRPC writes, populora.rpc), declared in the
OpenAPI documents as their security scheme, the id fields of populora.names' rule, the refusal of JSON booleans
where a number is expected, and a 405 whose Allow header names every method of the path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import grpc
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, BeforeValidator, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from populora import names
from populora.access import EVERY, Access, Refused
from populora.rpc import ServiceError
from populora.scopes import allowed, scope_of

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


# The one security scheme of both REST apps: what the OpenAPI documents declare on every operation that needs it.
BEARER = HTTPBearer(scheme_name="bearerToken", auto_error=False,
                    description="The server's `services.token` (or `$POPULORA_TOKEN`), or the caller's own scoped "
                                "token (`services.tokens`) where its scope allows the operation, sent as "
                                "`Authorization: Bearer <token>`; the same tokens as gRPC. A server without any "
                                "refuses these operations (403).")


def require_token(token: Callable[[], str], tokens: dict | Access | None = None, service: str = "",
                  method: str = "") -> Callable[..., None]:
    """A FastAPI dependency for the operations that need the credential: 403 while the server has neither its token
    nor scoped ones (they are disabled), 401 without `Authorization: Bearer <token>` matching the server's token
    or a scoped one of `tokens` (identity -> token), 403 for a scoped token whose identity may not call
    `service`.`method`, the gRPC method the operation runs (populora.scopes); an operation that runs none takes the
    server's token only. `tokens` may be the server's Access (tokens read again from their files), whose token
    then stands for `token`."""

    def check(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]) -> None:
        access = tokens if isinstance(tokens, Access) else Access(token(), tokens)
        if not access.token and not access.scoped:
            raise ServiceError(grpc.StatusCode.PERMISSION_DENIED,
                               "writes are disabled: set services.token (or $POPULORA_TOKEN) on the server")
        given = credentials.credentials if credentials else ""
        try:
            identity = access.identity(f"Bearer {given}", "", read_only=False)
        except Refused:
            raise ServiceError(grpc.StatusCode.UNAUTHENTICATED,
                               "this operation needs the header 'Authorization: Bearer <token>' with the server's "
                               "services.token" + (" or the caller's own (services.tokens)" if access.scoped else "")) from None
        if identity != EVERY and not (method and allowed(identity, service, method)):
            what = f"{service}.{method}" if method else "this operation (the server's services.token only)"
            raise ServiceError(grpc.StatusCode.PERMISSION_DENIED, f"{identity} may not call {what}; it may call: "
                                                                 f"{', '.join(scope_of(identity)) or 'nothing'}")

    return check


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
