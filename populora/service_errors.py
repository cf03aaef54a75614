"""The one error a service raises for its caller: a gRPC status code and a message for the user.

Services raise it through the constructors (`invalid`, `not_found`, `conflict`, `precondition`, `exhausted`,
`unimplemented`); the gRPC layer (`populora.rpc`) maps it to the call's status, and `populora.retry` waits out the
UNAVAILABLE ones. It has a module of its own so that both can import it without importing each other.
"""

from __future__ import annotations

import grpc


class ServiceError(Exception):
    """An error a service raises for its caller: `code` is a grpc.StatusCode, the message is for the user."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.NOT_FOUND, message)


def conflict(message: str) -> ServiceError:
    """A write that contradicts what exists (an id taken by another run or role, a child with other parents): the
    same request will fail again; REST answers it 409."""
    return ServiceError(grpc.StatusCode.ALREADY_EXISTS, message)


def precondition(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.FAILED_PRECONDITION, message)


def exhausted(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


def unimplemented(message: str) -> ServiceError:
    """A method the serving backend does not implement (the message names one that does)."""
    return ServiceError(grpc.StatusCode.UNIMPLEMENTED, message)
