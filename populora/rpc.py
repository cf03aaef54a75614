"""gRPC plumbing shared by every service: the contracts, one generic server and one generic client built from them,
the service token, error mapping, health, and AdapterRef conversion.

A service is a plain object with one method per RPC of its contract (`LeagueService.Matchmake(request) -> response`),
speaking the proto messages. In process, the object IS the client. Over the network, `serve` exposes it through a
handler built from the contract's descriptor, and `connect` returns a `Remote` whose methods have the same names and
messages, so a caller cannot tell the two apart: both raise `ServiceError` on failure.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from populora import names
from populora.access import (  # noqa: F401 - bearer and token_matches: their home for callers
    Access,
    AccessInterceptor,
    WatchedFile,
    bearer,
    one_token,
    token_matches,
)
from populora.contracts import CONTRACTS, SERVICE_NAMES, is_read_only  # noqa: F401 - their home for callers
from populora.pb import common_pb2
from populora.retry import Backoff, retrying, service_unavailable
from populora.service_errors import (  # noqa: F401
    ServiceError,
    conflict,
    exhausted,
    invalid,
    not_found,
    precondition,
)
from populora.tls import TlsFiles, channel_credentials, check_bind, server_credentials, uvicorn_ssl

if TYPE_CHECKING:
    from populora.store import AdapterRef

log = logging.getLogger(__name__)
MAX_MESSAGE_BYTES = 256 * 1024 * 1024



def ref_to_pb(ref: AdapterRef) -> common_pb2.AdapterRef:
    return common_pb2.AdapterRef(adapter_id=ref.adapter_id, version=ref.version, uri=ref.uri)


def ref_from_pb(msg: common_pb2.AdapterRef) -> AdapterRef:
    from populora.store import AdapterRef

    return AdapterRef(msg.adapter_id, int(msg.version), msg.uri)


def nul_field(message, path: str = "") -> str:
    """The path of the first string field (or map key) of `message`, nested messages included, that holds a NUL
    character, or "". Databases refuse NUL in text (Postgres raises), so a service that stores strings turns this
    into INVALID_ARGUMENT instead of an internal error."""
    for field, value in message.ListFields():
        where = f"{path}{field.name}"
        if field.type == field.TYPE_STRING:
            values = value if field.is_repeated else [value]
            for i, v in enumerate(values):
                if "\x00" in v:
                    return where + (f"[{i}]" if field.is_repeated else "")
        elif field.type == field.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                for k, v in value.items():
                    if isinstance(k, str) and "\x00" in k:
                        return f"{where}[{k!r}]"
                    if isinstance(v, str) and "\x00" in v:
                        return f"{where}[{k!r}]"
                    if hasattr(v, "ListFields") and (inner := nul_field(v, f"{where}[{k!r}].")):
                        return inner
                continue
            items = value if field.is_repeated else [value]
            for i, item in enumerate(items):
                prefix = f"{where}[{i}]." if field.is_repeated else f"{where}."
                if inner := nul_field(item, prefix):
                    return inner
    return ""


def check_names(request) -> None:
    """Every run, adapter and child id in a request against the one rule (populora.names): INVALID_ARGUMENT naming
    the field, before the service sees the request."""
    try:
        names.check_request(request)
    except names.InvalidName as e:
        raise invalid(str(e)) from None


# ----------------------------------------------------------------------------------------------------- server
@contextmanager
def status_on_error(context: grpc.ServicerContext, method: str):
    """Inside a handler: ServiceError -> its status; anything else -> INTERNAL, logged, server alive."""
    try:
        yield
    except ServiceError as e:
        context.abort(e.code, e.message)
    except Exception as e:  # noqa: BLE001 - one request's bug must not take the server down
        if isinstance(e, grpc.RpcError) or type(e).__name__ == "_AbortedError":
            raise
        log.exception("internal error in %s", method)
        context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")


def _handler(service: object, contract: ServiceDescriptor) -> grpc.GenericRpcHandler:
    """A gRPC handler for every method of `contract`, each calling the service's method of the same name."""
    handlers = {}
    for m in contract.methods:
        fn = getattr(service, m.name, None)
        if fn is None:
            raise TypeError(f"{type(service).__name__} has no method {m.name} of {contract.full_name}")
        request, response = GetMessageClass(m.input_type), GetMessageClass(m.output_type)
        if m.server_streaming:
            def stream(req, ctx, fn=fn, name=m.full_name):
                with status_on_error(ctx, name):
                    check_names(req)
                    yield from fn(req)

            handlers[m.name] = grpc.unary_stream_rpc_method_handler(stream, request.FromString,
                                                                    response.SerializeToString)
        else:
            def unary(req, ctx, fn=fn, name=m.full_name):
                with status_on_error(ctx, name):
                    check_names(req)
                    return fn(req)

            handlers[m.name] = grpc.unary_unary_rpc_method_handler(unary, request.FromString,
                                                                   response.SerializeToString)
    return grpc.method_handlers_generic_handler(contract.full_name, handlers)


def contract_of(service: object) -> ServiceDescriptor:
    contract = getattr(service, "CONTRACT", None)
    if not isinstance(contract, ServiceDescriptor):
        raise TypeError(f"{type(service).__name__} declares no CONTRACT (a ServiceDescriptor from rpc.CONTRACTS)")
    return contract


def make_server(services: Iterable[object], port: int, host: str = "127.0.0.1", token: str = "",
                max_workers: int = 16, interceptors: Iterable[grpc.ServerInterceptor] = (),
                tls: TlsFiles | None = None, tokens: dict | None = None, access: Access | None = None
                ) -> tuple[grpc.Server, int, health.HealthServicer]:
    """A started gRPC server for `services` (objects with a CONTRACT), with the scope check of every call
    (populora.access: the client certificate's identity, or the deployment's `token` or a scoped one of `tokens`)
    and the standard health service (SERVING for "" and each contract's name), over mutual TLS with `tls` (a client
    certificate signed by its CA required; `access` instead of token and tokens: tokens read from files). Returns
    (server, bound port, health); port 0 binds a free port."""
    services = list(services)
    contracts = [contract_of(s) for s in services]
    opts = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES), ("grpc.max_receive_message_length",
                                                                    MAX_MESSAGE_BYTES)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers), options=opts,
                         interceptors=[AccessInterceptor(access or Access(token, tokens, tls is not None), contracts),
                                       *interceptors])
    server.add_generic_rpc_handlers([_handler(s, c) for s, c in zip(services, contracts)])
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    address = f"{host}:{port}"
    bound = server.add_secure_port(address, server_credentials(tls)) if tls else server.add_insecure_port(address)
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port} (in use?)")
    server.start()
    for name in ("", *(c.full_name for c in contracts)):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, bound, health_servicer


def run_server(name: str, service: object, port: int, host: str, token: str, metrics_port: int = 0,
               rest_app=None, rest_port: int = 0, max_workers: int = 16, tls: TlsFiles | None = None,
               insecure: bool = False, tokens: dict | None = None, access: Access | None = None) -> int:
    """Serve one service over gRPC (token, health, metrics interceptor; mutual TLS with `tls`), its /metrics (on the
    REST app when it has one, else on metrics_port) and its REST app, then block until SIGTERM/SIGINT. Without TLS
    on an address other than loopback only when `insecure`. Used by `populora serve`."""
    import signal

    from populora.metrics import MetricsInterceptor, start_metrics_server

    check_bind(name, host, tls, insecure)
    access = access or Access(token, tokens, tls is not None)
    server, bound, health_servicer = make_server([service], port, host, token, max_workers,
                                                 interceptors=[MetricsInterceptor(name)], tls=tls, access=access)
    log.info("%s gRPC listening on %s:%d%s%s", name, host, bound, f" (mutual TLS as {tls.identity})" if tls else
             " (plaintext)", "" if access.takes_credentials() else " (no credential taken: writes refused)")
    uv = None
    if rest_app is not None and rest_port:
        import uvicorn

        uv = uvicorn.Server(uvicorn.Config(rest_app, host=host, port=rest_port, log_level="warning",
                                           **(uvicorn_ssl(tls) if tls else {})))
        threading.Thread(target=uv.run, daemon=True, name=f"{name}-rest").start()
        log.info("%s REST (and /metrics) on %s://%s:%d", name, "https" if tls else "http", host, rest_port)
    elif metrics_port:
        start_metrics_server(metrics_port, host, tls, name, access)
        log.info("%s /metrics on %s://%s:%d", name, "https" if tls else "http", host, metrics_port)
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


# ----------------------------------------------------------------------------------------------------- client
def channel(address: str, retries: int = 0, tls: TlsFiles | None = None, server_name: str = "") -> grpc.Channel:
    """A channel with large messages; round_robin spreads calls over every address a name resolves to (a headless
    k8s Service of replicas: "dns:///sandbox:50054"). With retries > 0, calls that fail UNAVAILABLE (a server
    restarting) are retried with backoff by gRPC itself; every write of the contracts is idempotent. With `tls`,
    mutual TLS: this side presents its certificate and the server's must name `server_name` (the service's identity,
    whatever address it is reached at)."""
    opts: list[tuple[str, Any]] = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                                   ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                   ("grpc.lb_policy_name", "round_robin")]
    if retries > 0:
        policy = {"maxAttempts": min(retries + 1, 5), "initialBackoff": "0.5s", "maxBackoff": "10s",
                  "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
        opts += [("grpc.enable_retries", 1),
                 ("grpc.service_config", json.dumps({"methodConfig": [{"name": [{}], "retryPolicy": policy}]}))]
    if tls is None:
        return grpc.insecure_channel(address, options=opts)
    if server_name:
        opts.append(("grpc.ssl_target_name_override", server_name))
    return grpc.secure_channel(address, channel_credentials(tls), options=opts)


def _service_error(e: grpc.RpcError) -> ServiceError:
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    details = e.details() if hasattr(e, "details") else str(e)
    return ServiceError(code, details or str(e))


class Remote:
    """A service over gRPC: one attribute per method of its contract, same names and messages as the service
    object, with the deadline, the token and the error mapping applied in one place. Streaming methods return an
    iterator, as the service's own do. With TLS, a call that finds the certificate files changed (renewed, a new CA
    bundle) opens a new channel with them first; calls in flight finish on the old one."""

    def __init__(self, contract: ServiceDescriptor, address: str, token: str = "", timeout: float | None = 600.0,
                 retries: int = 3, backoff: Backoff | None = None, tls: TlsFiles | None = None,
                 token_file: str = ""):
        self.contract, self.address, self.timeout = contract, address, timeout
        self.backoff = backoff  # a call answered UNAVAILABLE is tried again for this long (None: not at all)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._token_file = WatchedFile(token_file, one_token, "services.token_path") if token_file else None
        self._retries, self._tls = retries, tls
        self._server_name = next((n for n, c in CONTRACTS.items() if c is contract), "")
        self._stamp = tls.stamp() if tls else None
        self._lock, self._old = threading.Lock(), []
        self._open()
        for m in contract.methods:
            setattr(self, m.name, self._streaming(m.name) if m.server_streaming else self._unary(m.name))

    def _open(self) -> None:
        self._channel = channel(self.address, self._retries, self._tls, self._server_name)
        self._rpcs = {}
        for m in self.contract.methods:
            request, response = GetMessageClass(m.input_type), GetMessageClass(m.output_type)
            kind = self._channel.unary_stream if m.server_streaming else self._channel.unary_unary
            self._rpcs[m.name] = kind(f"/{self.contract.full_name}/{m.name}", request_serializer=request.SerializeToString,
                                      response_deserializer=response.FromString)

    def _rpc(self, name: str):
        """The method's callable on the current channel, after opening a new one if the TLS files changed."""
        if self._tls is not None and self._tls.stamp() != self._stamp:
            with self._lock:
                stamp = self._tls.stamp()
                if stamp != self._stamp and self._tls.pair_ok():
                    log.info("%s: certificate files changed, new connections use them", self._what(name))
                    self._old.append(self._channel)
                    self._stamp = stamp
                    self._open()
        return self._rpcs[name]

    def _auth(self) -> tuple:
        """The call's metadata: the token of the token file as it is now, else the one given."""
        if self._token_file is None:
            return self._metadata
        return (("authorization", f"Bearer {self._token_file.get()}"),)

    def _what(self, rpc_name: str) -> str:
        return f"{self.contract.name}.{rpc_name} at {self.address}"

    def _unary(self, name: str) -> Callable:
        def once(request):
            try:
                return self._rpc(name)(request, timeout=self.timeout, metadata=self._auth())
            except grpc.RpcError as e:
                raise _service_error(e) from None

        def invoke(request):
            # every write of the contracts is idempotent, so a call refused while a dependency is away is repeated
            return retrying(lambda: once(request), self._what(name), service_unavailable, self.backoff, log)

        return invoke

    def _streaming(self, name: str) -> Callable:
        def invoke(request) -> Iterator:
            # repeated only while nothing has arrived: a stream cut in the middle is the caller's to handle
            def start():
                stream = self._rpc(name)(request, timeout=self.timeout, metadata=self._auth())
                try:
                    return stream, next(stream)
                except StopIteration:
                    return stream, None
                except grpc.RpcError as e:
                    raise _service_error(e) from None

            stream, first = retrying(start, self._what(name), service_unavailable, self.backoff, log)
            if first is None:
                return
            yield first
            try:
                yield from stream
            except grpc.RpcError as e:
                raise _service_error(e) from None

        return invoke

    def close(self) -> None:
        for ch in (*self._old, self._channel):
            ch.close()


def connect(name: str, address: str, token: str = "", timeout: float | None = 600.0, retries: int = 3,
            backoff: Backoff | None = None, tls: TlsFiles | None = None, token_file: str = "") -> Any:
    """The remote `name` service (a key of CONTRACTS) at `address`. Callers hold it under the service's own type
    (coordinator.clients.services.Services), so call sites are checked against the service's method signatures."""
    return Remote(CONTRACTS[name], address, token, timeout, retries, backoff, tls, token_file)


# ----------------------------------------------------------------------------------------------------- health
def health_check(address: str, service: str = "", timeout: float = 5.0, tls: TlsFiles | None = None,
                 server_name: str = "") -> str:
    """The health status name of a server ("SERVING", ...); raises grpc.RpcError when it does not answer."""
    with channel(address, tls=tls, server_name=server_name) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


def wait_ready(address: str, timeout: float = 60.0, tls: TlsFiles | None = None, server_name: str = "") -> None:
    """Block until a server answers SERVING (used by tests and the distributed launcher)."""
    import time

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if health_check(address, timeout=2.0, tls=tls, server_name=server_name) == "SERVING":
                return
        except grpc.RpcError as e:
            last = e
        time.sleep(0.2)
    raise TimeoutError(f"gRPC server at {address} not ready after {timeout:.0f}s: {last}")
