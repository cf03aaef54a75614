"""Prometheus metrics shared by every service: request counts and latencies per RPC (a gRPC interceptor), plus the
service-specific gauges and histograms each service registers here, served at /metrics."""

from __future__ import annotations

import time

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
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


def start_metrics_server(port: int, host: str = "0.0.0.0", tls=None) -> None:
    """Serve /metrics on its own port (services without a REST app); HTTPS with the certificate of `tls`
    (populora.tls.TlsFiles) where the service speaks mutual TLS, a client certificate checked when one is presented
    and not required (a scraper that only checks the server's)."""
    if port and tls is not None:
        tls.read()
        start_http_server(port, addr=host, registry=REGISTRY, certfile=str(tls.cert), keyfile=str(tls.key),
                          client_cafile=str(tls.ca))
    elif port:
        start_http_server(port, addr=host, registry=REGISTRY)


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
