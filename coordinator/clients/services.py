"""The five services as the coordinator holds them: built in this process (embedded) or reached over gRPC
(distributed). Either way each is an object with one method per RPC of its contract, speaking the proto messages."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from populora.access import Access
from populora.config import Config
from populora.config.deployment import PLACED
from populora.retry import Backoff
from populora.rpc import SERVICE_NAMES, connect, run_server
from populora.tls import TlsFiles, tls_files

if TYPE_CHECKING:
    from services.evolver.service import EvolverService
    from services.inference.service import InferenceService
    from services.league.service import LeagueService
    from services.sandbox.service import SandboxService
    from services.trainer.service import TrainerService

# name -> (module, class): imported only when a service is built, so a coordinator that reaches every service over
# gRPC never loads a model or a database driver it does not use.
_TYPES = {name: (f"services.{name}.service", f"{name.capitalize()}Service") for name in SERVICE_NAMES}
_REST = {"league": "services.league.rest", "sandbox": "services.sandbox.rest"}


@dataclass
class Services:
    """What the step calls. In process these are the service objects themselves; distributed, `populora.rpc.Remote`
    proxies with the same methods and messages (and the same ServiceError on failure)."""

    inference: InferenceService
    trainer: TrainerService
    league: LeagueService
    sandbox: SandboxService
    evolver: EvolverService

    def close(self) -> None:
        for f in fields(self):
            close = getattr(getattr(self, f.name), "close", None)
            if close is not None:
                close()


def service_type(name: str) -> type:
    if name not in _TYPES:
        raise ValueError(f"unknown service '{name}'; allowed: {list(SERVICE_NAMES)}")
    module, cls = _TYPES[name]
    return getattr(importlib.import_module(module), cls)


def build(name: str, cfg: Config) -> Any:
    """The service `name` in this process, from the configuration."""
    return service_type(name).from_config(cfg)


def client_tls(cfg: Config) -> TlsFiles | None:
    """The certificate files this process presents as a client (services.tls; the coordinator's identity unless
    services.tls.identity names another), or None without TLS."""
    return tls_files(cfg.services.tls)


def remote(name: str, cfg: Config) -> Any:
    """The service `name` over gRPC at cfg.services.<name>, with the run's token, deadline and retries. A trainer or
    inference with several replicas (`replicas`, or `resolve` of a DNS name) is one object over all of them, each
    adapter's calls going to its owner (coordinator.clients.replicas)."""
    ep = getattr(cfg.services, name)
    if name in PLACED and (ep.replicas or ep.resolve):
        from coordinator.clients.replicas import placed

        return placed(name, cfg)
    return connect(name, f"{ep.host}:{ep.port}", cfg.services.token, cfg.services.grpc_timeout_s,
                   cfg.services.grpc_retries, Backoff.from_config(cfg), client_tls(cfg), cfg.services.token_path)


def open_services(cfg: Config) -> Services:
    """In-process services (embedded) or gRPC proxies (distributed), as `cfg.run.deployment` says."""
    make = build if cfg.run.deployment == "embedded" else remote
    return Services(**{name: make(name, cfg) for name in SERVICE_NAMES})


def serve(name: str, cfg: Config, port: int | None = None, bind: str | None = None,
          metrics_port: int | None = None, insecure: bool = False) -> int:
    """`populora serve NAME`: build the service, then serve its contract over gRPC on cfg.services.<name>.port
    (bound to cfg.services.<name>.bind unless `bind` says otherwise; mutual TLS as services.tls says, plaintext on
    a non-loopback address only when `insecure` or services.tls.insecure), its REST app where it has one, /metrics.
    TLS settings and token files that cannot work fail before the service is built."""
    from populora.tls import check_bind

    ep = getattr(cfg.services, name)
    tls = tls_files(cfg.services.tls, name)
    insecure = insecure or cfg.services.tls.insecure
    check_bind(name, bind or ep.bind, tls, insecure)
    access = Access.from_config(cfg.services, tls is not None, server=name)
    service = build(name, cfg)
    rest_app = importlib.import_module(_REST[name]).create_app(service, access=access) if name in _REST else None
    try:
        return run_server(name, service, ep.port if port is None else port, bind or ep.bind, cfg.services.token,
                          metrics_port=ep.metrics_port if metrics_port is None else metrics_port,
                          rest_app=rest_app, rest_port=ep.rest_port,
                          max_workers=getattr(service, "GRPC_WORKERS", 16), tls=tls, insecure=insecure,
                          access=access)
    finally:
        close = getattr(service, "close", None)
        if close is not None:
            close()
