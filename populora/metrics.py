"""Prometheus metrics shared by every service: request counts and latencies per RPC (a gRPC interceptor), plus the
service-specific gauges and histograms each service registers here, served at /metrics: on the REST app of the league
and the sandbox, on a port of its own for the others. /metrics is its service's `Read` (populora.scopes): open on a
plaintext server without scoped tokens, else for a reader's credential (the dashboard's certificate or token)."""

from __future__ import annotations

import time

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import generate_latest as _generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

RPC_REQUESTS = Counter("populora_rpc_requests_total", "gRPC requests by service, method and status code",
                       ["service", "method", "code"], registry=REGISTRY)
RPC_LATENCY = Histogram("populora_rpc_latency_seconds", "gRPC request latency", ["service", "method"],
                        registry=REGISTRY, buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300))
BATCH_SIZE = Histogram("populora_batch_size", "items per batched request", ["service", "method"],
                       registry=REGISTRY, buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096))
QUEUE_DEPTH = Gauge("populora_queue_depth", "entries waiting in a step-phase stream", ["stream"], registry=REGISTRY)
SANDBOX_STATUS = Counter("populora_sandbox_results_total", "sandbox job results by status", ["status"],
                         registry=REGISTRY)
TOKENS_PER_S = Gauge("populora_tokens_per_second", "generation or training throughput of the last batch",
                     ["service", "kind"], registry=REGISTRY)
TOKENS = Counter("populora_tokens_total", "tokens generated, trained on or scored", ["service", "kind"],
                 registry=REGISTRY)


def generate_latest() -> bytes:
    return _generate_latest(REGISTRY)


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def metrics_app(service: str, access):
    """An app that serves /metrics alone, as `service`'s `Read`, its callers checked by `access`
    (populora.access.Access)."""
    from fastapi import Depends, FastAPI
    from fastapi.responses import Response

    from populora.http import guard, requirement

    app = FastAPI(title=f"PopuLoRA {service} metrics", openapi_url=None, docs_url=None, redoc_url=None)

    @app.get("/metrics", dependencies=[Depends(requirement(service, "Read"))])
    def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE)

    guard(app, access, service)
    return app


def start_metrics_server(port: int, host: str = "0.0.0.0", tls=None, service: str = "", access=None):
    """Serve /metrics on its own port in a thread (services without a REST app) and return the uvicorn server once
    it listens (None for port 0); HTTPS with the certificate of `tls` (populora.tls.TlsFiles) where the service speaks
    mutual TLS, a client certificate naming the caller where one is presented. `access` (populora.access.Access)
    checks the callers; by default no credential but a certificate, so /metrics is open on plaintext and needs a
    reader's certificate over HTTPS."""
    if not port:
        return None
    import threading

    import uvicorn

    from populora.access import Access
    from populora.tls import uvicorn_ssl

    service = service or (tls.identity if tls is not None else "inference")
    app = metrics_app(service, access if access is not None else Access(tls=tls is not None))
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                                           **(uvicorn_ssl(tls) if tls is not None else {})))
    def serve() -> None:
        try:
            server.run()
        except SystemExit:  # uvicorn's answer to a port it cannot bind (it logs why); the wait below reports it
            pass

    thread = threading.Thread(target=serve, daemon=True, name=f"{service}-metrics")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive():
            raise OSError(f"{service}: /metrics cannot listen on {host}:{port} (in use?)")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{service}: /metrics did not start on {host}:{port} within 30 s")
        time.sleep(0.02)
    return server


class MetricsInterceptor(grpc.ServerInterceptor):
    """Counts and times every unary and server-streaming RPC of a service."""

    def __init__(self, service: str):
        self.service = service

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method.rsplit("/", 1)[-1]
        service = self.service

        def record(code: str, start: float) -> None:
            RPC_REQUESTS.labels(service, method, code).inc()
            RPC_LATENCY.labels(service, method).observe(time.perf_counter() - start)

        def code_of(context) -> str:
            code = context.code() if hasattr(context, "code") else None
            return code.name if isinstance(code, grpc.StatusCode) else "OK"

        if handler.unary_unary:
            inner = handler.unary_unary

            def unary(request, context):
                start = time.perf_counter()
                try:
                    resp = inner(request, context)
                except Exception:
                    record(code_of(context) if code_of(context) != "OK" else "UNKNOWN", start)
                    raise
                record(code_of(context), start)
                return resp

            return grpc.unary_unary_rpc_method_handler(unary, handler.request_deserializer,
                                                       handler.response_serializer)
        if handler.unary_stream:
            inner_stream = handler.unary_stream

            def stream(request, context):
                start = time.perf_counter()
                try:
                    yield from inner_stream(request, context)
                except Exception:
                    record(code_of(context) if code_of(context) != "OK" else "UNKNOWN", start)
                    raise
                record(code_of(context), start)

            return grpc.unary_stream_rpc_method_handler(stream, handler.request_deserializer,
                                                        handler.response_serializer)
        return handler
