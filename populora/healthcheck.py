"""`python -m populora.healthcheck [HOST:PORT]`: exit 0 when a service's gRPC health service answers SERVING.

Container health checks (the Dockerfile's HEALTHCHECK, docker-compose `healthcheck`) run this every few seconds,
so it imports only grpc and the standard health stubs (and, to find a port from the config, the config loader and
the list of services), never torch. It speaks the same protocol as `populora.rpc.health_check`: grpc.health.v1
`Check`.

Without an address it finds the port from the configuration the service itself reads: the service named by
$POPULORA_SERVICE (or --service) in the file $POPULORA_CONFIG plus POPULORA__* overrides, on 127.0.0.1. Where that
configuration turns on services.tls, the probe speaks mutual TLS with the service's own certificate and expects the
service's name on the server's.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Probe:
    """One health probe: where to ask, which gRPC service name ("" = the whole server), how long to wait."""

    address: str
    service: str = ""
    timeout_s: float = 3.0
    tls: Any = None  # populora.tls.TlsFiles: mutual TLS, presenting these
    server_name: str = ""  # with tls: the name the server's certificate must carry


def check(probe: Probe) -> tuple[bool, str]:
    """(healthy, what was seen): healthy only when the server answers SERVING within the timeout."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    if probe.tls is not None:
        from populora.tls import channel_credentials

        ch = grpc.secure_channel(probe.address, channel_credentials(probe.tls),
                                 options=[("grpc.ssl_target_name_override", probe.server_name)])
    else:
        ch = grpc.insecure_channel(probe.address)
    with ch:
        stub = health_pb2_grpc.HealthStub(ch)
        try:
            resp = stub.Check(health_pb2.HealthCheckRequest(service=probe.service), timeout=probe.timeout_s)
        except grpc.RpcError as e:
            code = e.code().name if hasattr(e, "code") else "UNKNOWN"
            return False, f"{probe.address}: no answer from the gRPC health service ({code})"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
    return status == "SERVING", f"{probe.address}: {status}"


def address_from_config(service: str) -> str:
    """127.0.0.1:<services.<service>.port> of the configuration in $POPULORA_CONFIG (+ POPULORA__* overrides)."""
    from populora.contracts import SERVICE_NAMES

    if service not in SERVICE_NAMES:
        raise ValueError(f"unknown service '{service}'; allowed: {list(SERVICE_NAMES)} "
                         "(set POPULORA_SERVICE or pass --service, or give HOST:PORT)")
    from populora.config import load_config

    cfg = load_config()
    return f"127.0.0.1:{getattr(cfg.services, service).port}"


def tls_from_config(service: str):
    """The TLS files the service `service` presents, where its configuration turns TLS on (None otherwise, and for
    a name that is no service)."""
    from populora.contracts import SERVICE_NAMES

    if service not in SERVICE_NAMES:
        return None
    from populora.config import load_config
    from populora.tls import tls_files

    return tls_files(load_config().services.tls, service)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m populora.healthcheck",
                                description="Exit 0 when a PopuLoRA service's gRPC health service is SERVING.")
    p.add_argument("address", nargs="?", help="HOST:PORT of the gRPC server (default: from the configuration "
                                              "of --service / $POPULORA_SERVICE, on 127.0.0.1)")
    p.add_argument("--service", default=os.environ.get("POPULORA_SERVICE", ""),
                   help="which PopuLoRA service this container runs (default: $POPULORA_SERVICE)")
    p.add_argument("--grpc-service", default="", help="gRPC service name to ask about (default: the server)")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer (default 3)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        address = args.address or address_from_config(args.service)
        tls = tls_from_config(args.service)
    except ValueError as e:  # ConfigError is a ValueError too
        print(f"unhealthy: {e}", file=sys.stderr)
        return 1  # Docker reserves exit code 2; every failure is 1 (unhealthy)
    healthy, seen = check(Probe(address, args.grpc_service, args.timeout, tls, args.service))
    print(("healthy: " if healthy else "unhealthy: ") + seen, file=sys.stdout if healthy else sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
