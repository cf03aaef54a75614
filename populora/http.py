"""What the REST apps of the league and the sandbox share: the status code of each service error, the bearer-token
dependency of their write endpoints (the same token as gRPC writes, populora.rpc), the refusal of JSON booleans
where a number is expected, and a 405 whose Allow header names every method of the path."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BeforeValidator
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from populora.rpc import ServiceError, bearer, token_matches

HTTP_STATUS = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.NOT_FOUND: 404,
               grpc.StatusCode.FAILED_PRECONDITION: 409, grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
               grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.PERMISSION_DENIED: 403,
               grpc.StatusCode.UNAVAILABLE: 503}


def http_status(e: ServiceError) -> int:
    return HTTP_STATUS.get(e.code, 500)


def require_token(token: Callable[[], str]) -> Callable[[str], None]:
    """A FastAPI dependency for write endpoints: 403 while the server has no token (writes disabled), 401 without
    `Authorization: Bearer <token>` matching it."""

    def check(authorization: str = Header("", description="Bearer <token>")) -> None:
        expected = token()
        if not expected:
            raise ServiceError(grpc.StatusCode.PERMISSION_DENIED,
                               "writes are disabled: set services.token (or $POPULORA_TOKEN) on the server")
        if not token_matches(bearer(authorization), expected):
            raise ServiceError(grpc.StatusCode.UNAUTHENTICATED,
                               "a write needs the header 'Authorization: Bearer <token>' with the server's "
                               "services.token")

    return check


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
