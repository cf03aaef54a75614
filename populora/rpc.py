"""gRPC plumbing shared by every service: server start-up with the standard health service, error mapping,
conversion of AdapterRef messages, and client channels."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent import futures
from contextlib import contextmanager

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from populora.pb import common_pb2
from populora.store import AdapterRef

log = logging.getLogger(__name__)
MAX_MESSAGE_BYTES = 256 * 1024 * 1024


class ServiceError(Exception):
    """An error a servicer turns into a gRPC status: `code` is a grpc.StatusCode, the message is for the user."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.NOT_FOUND, message)


def precondition(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.FAILED_PRECONDITION, message)


def exhausted(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


@contextmanager
def status_on_error(context: grpc.ServicerContext):
    """Inside a servicer method: ServiceError -> its status; anything else -> INTERNAL, logged, server alive."""
    try:
        yield
    except ServiceError as e:
        context.abort(e.code, e.message)
    except Exception as e:  # noqa: BLE001 - one request's bug must not take the server down
        if isinstance(e, grpc.RpcError) or type(e).__name__ == "_AbortedError":
            raise
        log.exception("internal error in %s", getattr(context, "_rpc_event", "rpc"))
        context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")


def ref_to_pb(ref: AdapterRef) -> common_pb2.AdapterRef:
    return common_pb2.AdapterRef(adapter_id=ref.adapter_id, version=ref.version, uri=ref.uri)


def ref_from_pb(msg: common_pb2.AdapterRef) -> AdapterRef:
    return AdapterRef(msg.adapter_id, int(msg.version), msg.uri)


def make_server(add_servicers: Iterable[Callable[[grpc.Server], None]], port: int, host: str = "0.0.0.0",
                max_workers: int = 16, service_names: Iterable[str] = (),
                interceptors: Iterable[grpc.ServerInterceptor] = ()) -> tuple[grpc.Server, int,
                                                                               health.HealthServicer]:
    """A started gRPC server with the standard health service (SERVING for "" and every name given).

    Returns (server, bound port, health servicer); port 0 binds a free port.
    """
    opts = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES), ("grpc.max_receive_message_length",
                                                                    MAX_MESSAGE_BYTES)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers), options=opts,
                         interceptors=list(interceptors))
    for add in add_servicers:
        add(server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port} (in use?)")
    server.start()
    for name in ("", *service_names):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, bound, health_servicer


def channel(address: str) -> grpc.Channel:
    # round_robin spreads calls over every address a name resolves to (e.g. a headless k8s Service of sandbox
    # replicas: use "dns:///sandbox:50054"); with one address it behaves like the default.
    opts = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES), ("grpc.max_receive_message_length",
                                                                    MAX_MESSAGE_BYTES),
            ("grpc.lb_policy_name", "round_robin")]
    return grpc.insecure_channel(address, options=opts)


def health_check(address: str, service: str = "", timeout: float = 5.0) -> str:
    """The health status name of a server ("SERVING", ...); raises grpc.RpcError when it does not answer."""
    with channel(address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


def wait_ready(address: str, timeout: float = 60.0) -> None:
    """Block until a server answers SERVING (used by tests and the distributed launcher)."""
    import time

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if health_check(address, timeout=2.0) == "SERVING":
                return
        except grpc.RpcError as e:
            last = e
        time.sleep(0.2)
    raise TimeoutError(f"gRPC server at {address} not ready after {timeout:.0f}s: {last}")


def call(method: Callable, request, timeout: float | None = None):
    """Call a unary gRPC stub method; a failed call raises ServiceError with the server's code and message, so
    callers handle in-process and gRPC clients alike."""
    try:
        return method(request, timeout=timeout)
    except grpc.RpcError as e:
        code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
        details = e.details() if hasattr(e, "details") else str(e)
        raise ServiceError(code, details or str(e)) from None


def call_stream(method: Callable, request, timeout: float | None = None):
    """Iterate a server-streaming gRPC call, with errors as ServiceError (see `call`)."""
    try:
        yield from method(request, timeout=timeout)
    except grpc.RpcError as e:
        code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
        details = e.details() if hasattr(e, "details") else str(e)
        raise ServiceError(code, details or str(e)) from None


def run_server(name: str, add_servicers: Iterable[Callable[[grpc.Server], None]], port: int, host: str = "0.0.0.0",
               service_names: Iterable[str] = (), metrics_port: int = 0, rest_app=None, rest_port: int = 0,
               max_workers: int = 16) -> int:
    """Start a service's gRPC server (health + metrics interceptor), its /metrics (on the REST app when it has one,
    else on metrics_port) and its REST app, then block until SIGTERM/SIGINT. Used by every `populora serve`."""
    import signal
    import threading

    from populora.metrics import MetricsInterceptor, start_metrics_server

    server, bound, health_servicer = make_server(add_servicers, port, host, max_workers, service_names,
                                                 interceptors=[MetricsInterceptor(name)])
    log.info("%s gRPC listening on %s:%d", name, host, bound)
    uv = None
    if rest_app is not None and rest_port:
        import uvicorn

        uv = uvicorn.Server(uvicorn.Config(rest_app, host=host, port=rest_port, log_level="warning"))
        threading.Thread(target=uv.run, daemon=True, name=f"{name}-rest").start()
        log.info("%s REST (and /metrics) on %s:%d", name, host, rest_port)
    elif metrics_port:
        start_metrics_server(metrics_port, host)
        log.info("%s /metrics on %s:%d", name, host, metrics_port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    log.info("%s shutting down", name)
    health_servicer.enter_graceful_shutdown()
    if uv is not None:
        uv.should_exit = True
    server.stop(grace=5).wait()
    return 0
