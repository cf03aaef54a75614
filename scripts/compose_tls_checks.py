"""What `make test-compose` (scripts/test_compose.py) checks of the stack's TLS from the host, outside the containers:
the certificates and Redis ACL file it makes for the stack, an HTTPS client that checks a service's certificate
against the stack's CA under the service's name, and that a plaintext connection to every port the host reaches is
refused (gRPC, REST and /metrics, Postgres, Redis) while the same port answers over TLS.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any

import httpx

from populora.certs import NAMES, write_certs
from populora.datastores import redis_acl

# the uid the project image's services run as (the Dockerfile's USER): their keys must be readable by it
SERVICE_UID = 10001


def make_certs(directory: Path) -> Path:
    """A CA and a certificate per identity and data store in `directory`; each service's key readable by the uid
    its container runs as (as root: chown; otherwise readable by all, the directory being private)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_certs(directory, NAMES, days=2)
    for name in NAMES:
        key = directory / f"{name}-key.pem"
        if os.geteuid() == 0:
            os.chown(key, SERVICE_UID, SERVICE_UID)  # postgres and redis copy theirs first (deploy/compose/*-tls.sh)
        else:
            key.chmod(0o644)
    directory.chmod(0o755)
    return directory


def write_redis_acl(path: Path, password: str) -> None:
    path.write_text(redis_acl({"coordinator": password}))
    path.chmod(0o444)  # copied to a file only the redis user reads by deploy/compose/redis-tls.sh


def https_context(certs: Path, identity: str = "coordinator") -> ssl.SSLContext:
    """Checks the server against the stack's CA (its name: httpx's sni_hostname) and presents `identity`'s
    certificate."""
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    ctx.load_cert_chain(str(certs / f"{identity}.pem"), str(certs / f"{identity}-key.pem"))
    return ctx


def https_get(url: str, certs: Path, server_name: str, timeout: float = 30, identity: str = "coordinator"
              ) -> httpx.Response:
    """GET `url` over HTTPS as `identity` (its client certificate names the caller), the server checked as
    `server_name`."""
    with httpx.Client(verify=https_context(certs, identity), timeout=timeout) as client:
        return client.get(url, extensions={"sni_hostname": server_name})


def _grpc_plaintext(address: str) -> str:
    """'' when a plaintext gRPC health check to `address` fails, else what it got."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as ch:
        try:
            resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.RpcError:
            return ""
    return f"gRPC {address}: a plaintext health check was answered ({resp.status})"


def _grpc_tls(address: str, certs: Path, server_name: str) -> str:
    """'' when a mutual-TLS health check to `address` answers SERVING."""
    from populora.healthcheck import Probe, check
    from populora.tls import TlsFiles

    files = TlsFiles("coordinator", certs / "ca.pem", certs / "coordinator.pem", certs / "coordinator-key.pem")
    ok, seen = check(Probe(address, tls=files, server_name=server_name, timeout_s=10))
    return "" if ok else f"gRPC {address} over mutual TLS: {seen}"


def _http_plaintext(url: str) -> str:
    try:
        resp = httpx.get(url, timeout=10)
    except httpx.HTTPError:
        return ""
    return f"{url}: plain HTTP was answered (HTTP {resp.status_code})"


def _postgres(host: str, password: str, certs: Path) -> tuple[str, str]:
    """(plaintext problem, TLS problem): a connection without TLS must be refused, one with it (the CA checked)
    must get in."""
    import psycopg

    base = {"host": host, "port": 5432, "user": "populora", "password": password, "dbname": "populora",
            "connect_timeout": 10}
    plain = ""
    try:
        psycopg.connect(**base, sslmode="disable").close()
        plain = f"postgres {host}:5432: a connection without TLS got in"
    except psycopg.OperationalError as e:
        if "no encryption" not in str(e) and "pg_hba.conf" not in str(e):
            plain = f"postgres {host}:5432: refused without TLS, but not by pg_hba.conf: {str(e)[:200]}"
    tls = ""
    try:
        # verify-ca: the host reaches the container by address, not by the name in its certificate
        with psycopg.connect(**base, sslmode="verify-ca", sslrootcert=str(certs / "ca.pem")) as conn:
            if not conn.pgconn.ssl_in_use:
                tls = f"postgres {host}:5432: connected, but not over TLS"
    except psycopg.OperationalError as e:
        tls = f"postgres {host}:5432 over TLS: {str(e)[:200]}"
    return plain, tls


def _redis(host: str, password: str, certs: Path) -> tuple[str, str]:
    """(plaintext problem, TLS problem) for Redis: plaintext refused, TLS as the ACL user coordinator answers."""
    import redis

    plain = ""
    try:
        redis.Redis(host=host, port=6379, socket_timeout=10, socket_connect_timeout=10).ping()
        plain = f"redis {host}:6379: a plaintext PING was answered"
    except redis.exceptions.RedisError:
        pass
    tls = ""
    try:
        client = redis.Redis(host=host, port=6379, username="coordinator", password=password, ssl=True,
                             ssl_ca_certs=str(certs / "ca.pem"), ssl_certfile=str(certs / "coordinator.pem"),
                             ssl_keyfile=str(certs / "coordinator-key.pem"), ssl_check_hostname=False,
                             socket_timeout=10)
        if client.xlen("populora:steps:absent") != 0:
            tls = f"redis {host}:6379 over TLS: unexpected answer"
        try:
            client.set("populora:x", "1")
            tls = f"redis {host}:6379: the coordinator's ACL user may SET"
        except redis.exceptions.NoPermissionError:
            pass
    except redis.exceptions.RedisError as e:
        tls = f"redis {host}:6379 over TLS as coordinator: {type(e).__name__}: {e}"
    return plain, tls


def plaintext_refused(address, league_port: int, services: dict[str, Any], certs: Path, db_password: str,
                      redis_password: str) -> dict[str, Any]:
    """Every port of the stack the host reaches, tried in plaintext (refused: counted in `plaintext_refused`) and
    over TLS (must answer). `address(service)` is a container's address. Returns {"plaintext_checked",
    "plaintext_refused", "tls_answered", "problems"}."""
    plain: dict[str, str] = {}
    tls: dict[str, str] = {}
    grpc_ports = {"inference": 50051, "trainer": 50052, "league": 50053, "sandbox": 50054, "evolver": 50055}
    for name, default in grpc_ports.items():
        port = services.get(name, {}).get("port", default)
        where = f"{address(name)}:{port}"
        plain[f"grpc:{name}"] = _grpc_plaintext(where)
        tls[f"grpc:{name}"] = _grpc_tls(where, certs, name)
    http_ports = {"league": f"127.0.0.1:{league_port}",
                  "sandbox": f"{address('sandbox')}:{services['sandbox']['rest_port']}"}
    for name in ("inference", "trainer", "evolver"):
        http_ports[name] = f"{address(name)}:{services[name]['metrics_port']}"
    for name, hostport in http_ports.items():
        path = "/metrics"
        plain[f"http:{name}"] = _http_plaintext(f"http://{hostport}{path}")
        try:
            resp = https_get(f"https://{hostport}{path}", certs, name, identity="dashboard")  # /metrics: a reader
            tls[f"http:{name}"] = "" if resp.status_code == 200 else f"https://{hostport}{path}: HTTP {resp.status_code}"
        except httpx.HTTPError as e:
            tls[f"http:{name}"] = f"https://{hostport}{path}: {type(e).__name__}: {e}"
    plain["postgres"], tls["postgres"] = _postgres(address("postgres"), db_password, certs)
    plain["redis"], tls["redis"] = _redis(address("redis"), redis_password, certs)
    problems = [p for p in plain.values() if p] + [p for p in tls.values() if p]
    return {"plaintext_checked": len(plain), "plaintext_refused": sum(not p for p in plain.values()),
            "tls_answered": sum(not p for p in tls.values()), "problems": problems}

