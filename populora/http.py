"""What the REST apps of the league and the sandbox share: the status code of each service error and the bearer-token
dependency of their write endpoints (the same token as gRPC writes, populora.rpc)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from fastapi import Header

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
