"""Config sections of how a run is deployed: the sandbox, the step queue, outages, service endpoints, the store."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from populora.config.base import Section


class SandboxConfig(Section):
    backend: Literal["zygote", "subprocess", "gvisor"] = "zygote"
    """Executor: warm forking zygotes in a jail (default), one plain subprocess per job, or zygotes each inside
    one long-lived gVisor sandbox (runsc, ptrace platform) started by this service."""
    workers: int = Field(0, ge=0)
    """Worker processes; 0 = one per core."""
    timeout_s: float = Field(5.0, gt=0)
    """[choice] Wall-clock limit of one job (spec 3.5)."""
    memory_mb: int = Field(256, ge=16)
    """Address-space limit of one job."""
    output_kb: int = Field(64, ge=1)
    """Largest stdout + result of one job."""
    isolation: Literal["auto", "bwrap", "unshare", "gvisor", "none"] = "auto"
    """Jail of the zygote backend; `auto` = bwrap, else unshare; `gvisor` when the sandbox itself runs inside
    gVisor (a container under runsc: no namespaces there, uid, rlimits and seccomp checked at start-up);
    `none` only for development."""
    seccomp: bool = True
    """Install the seccomp filter in every job."""
    verifiers: dict[str, str] = Field(default_factory=dict)
    """External verifier name per task type (registered over REST); a task type not named uses the sandbox."""
    verifier_timeout_s: float = Field(10.0, gt=0)
    """Timeout of one call to an external verifier."""
    verifier_retries: int = Field(2, ge=0)
    """Retries of a failed external-verifier call."""
    breaker_failures: int = Field(5, ge=1)
    """Consecutive failures that open an external verifier's circuit breaker."""
    breaker_reset_s: float = Field(30.0, gt=0)
    """Seconds an open circuit breaker waits before it lets one call through."""
    db_url: str = ""
    """Database of the external-verifier registry; empty = league.db_url (one shared database)."""


class QueueConfig(Section):
    backend: Literal["inprocess", "redis"] = "inprocess"
    """Step-phase queue: in-process (embedded) or Redis Streams (distributed)."""
    redis_url: str = "redis://127.0.0.1:6379/0"
    """Redis server of the streams: `redis://` plaintext, `rediss://[USER:PASSWORD@]HOST:PORT/DB` over TLS (a
    deployment's Redis has an ACL user per client: populora.datastores)."""
    redis_ca: str = ""
    """rediss:// only: the CA certificate the Redis server's certificate is checked against (its name must match the
    URL's host); empty = services.tls's CA when services.tls is on."""
    redis_cert: str = ""
    """rediss:// only: the client certificate presented to Redis (`--tls-auth-clients yes`); empty = this process's
    services.tls certificate when services.tls is on."""
    redis_key: str = ""
    """rediss:// only: the key of queue.redis_cert; empty = this process's services.tls key when that is on."""
    claim_idle_ms: int = Field(60_000, ge=100)
    """A pending entry idle this long is reclaimed by another consumer."""
    stream_prefix: str = "populora"
    """Prefix of the stream and group names."""


class OutageConfig(Section):
    wait_s: float = Field(300.0, ge=0)
    """How long the coordinator and the phase workers wait for Postgres, Redis or a service that went away (or
    answers UNAVAILABLE while its own database is away), retrying with exponential backoff, before the call fails
    naming what did not come back (0 = fail at once)."""
    backoff_initial_s: float = Field(0.5, gt=0)
    """Pause before the first retry; each next pause doubles, up to backoff_max_s."""
    backoff_max_s: float = Field(10.0, gt=0)
    """Longest pause between two retries."""

    @model_validator(mode="after")
    def _ordered(self) -> OutageConfig:
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("outage.backoff_max_s must be >= outage.backoff_initial_s")
        return self


class ServiceEndpoint(Section):
    host: str = "127.0.0.1"
    """Address clients connect to (a host name in containers: `league`, `sandbox`, ...)."""
    bind: str = "127.0.0.1"
    """Address the service listens on: loopback unless a deployment says otherwise (the container files bind
    0.0.0.0, inside their own network namespace)."""
    port: int = Field(ge=1, le=65535)
    """gRPC port."""
    metrics_port: int = Field(0, ge=0, le=65535)
    """Prometheus /metrics port (0 = the REST port where the service has one, else none)."""
    rest_port: int = Field(0, ge=0, le=65535)
    """REST port (league and sandbox); 0 = no REST."""
    replicas: list[str] = Field(default_factory=list)
    """Trainer and inference only: the addresses (`host:port`) of the service's replicas, each holding the share of
    the adapters that rendezvous hashing gives it (populora.placement, spec 17); empty = one replica at host:port."""
    resolve: bool = False
    """Trainer and inference only: every IPv4 address `host` resolves to (socket.getaddrinfo) is one replica on
    `port`, as a Kubernetes headless Service or Compose's `--scale` present them; resolved when the coordinator
    connects and again when a replica stops answering."""

    @model_validator(mode="after")
    def _replica_list(self) -> ServiceEndpoint:
        if self.replicas and self.resolve:
            raise ValueError("give either replicas (a list of host:port) or resolve: true (host is a DNS name of "
                             "several addresses), not both")
        seen = set()
        for i, address in enumerate(self.replicas):
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise ValueError(f"replicas[{i}] = {address!r} is not host:port with a port in 1..65535")
            if address in seen:
                raise ValueError(f"replicas[{i}] = {address!r} is listed twice; each replica once")
            seen.add(address)
        return self


PLACED = ("trainer", "inference")  # the services that hold adapters, so each replica holds its own share
UNPLACED = ("league", "sandbox", "evolver")


class TlsConfig(Section):
    enabled: bool = False
    """Mutual TLS on every gRPC connection: each server presents its identity's certificate and requires a client
    certificate signed by the CA, each client presents its own and checks the server's name. Off: plaintext, which
    a server binding a non-loopback address refuses unless `insecure` (`populora certs` writes the files)."""
    dir: str = ""
    """Directory `populora certs --dir` wrote: ca.pem, NAME.pem and NAME-key.pem per identity."""
    ca: str = ""
    """The CA certificate(s) a peer's certificate must be signed by (PEM; several for a CA rotation); default
    dir/ca.pem."""
    cert: str = ""
    """This process's certificate (PEM); default dir/IDENTITY.pem."""
    key: str = ""
    """This process's private key (PEM); default dir/IDENTITY-key.pem."""
    identity: str = ""
    """The identity (populora.scopes.IDENTITIES) of a process that serves no contract (default coordinator; a
    dashboard reader says dashboard); a service always presents its own name's certificate."""
    insecure: bool = False
    """Let a server bind a non-loopback address without TLS (`populora serve --insecure`); said in its log."""


class ServicesConfig(Section):
    inference: ServiceEndpoint = ServiceEndpoint(port=50051, metrics_port=9101)
    """Inference service endpoint."""
    trainer: ServiceEndpoint = ServiceEndpoint(port=50052, metrics_port=9102)
    """Trainer service endpoint."""
    league: ServiceEndpoint = ServiceEndpoint(port=50053, rest_port=8080)
    """League service endpoint (REST leaderboard on rest_port)."""
    sandbox: ServiceEndpoint = ServiceEndpoint(port=50054, rest_port=8081)
    """Sandbox service endpoint (REST on rest_port)."""
    evolver: ServiceEndpoint = ServiceEndpoint(port=50055, metrics_port=9105)
    """Evolver service endpoint."""
    grpc_timeout_s: float = Field(600.0, gt=0)
    """Deadline of one gRPC call from the coordinator."""
    grpc_retries: int = Field(3, ge=0, le=4)
    """Retries of a gRPC call that finds its server UNAVAILABLE (restarting); every write is idempotent."""
    tls: TlsConfig = TlsConfig()
    """Mutual TLS between the services (off by default: embedded runs and loopback clusters stay plaintext)."""
    token: str = ""
    """The bearer token this process presents (`authorization` metadata, `Authorization` header): a client's own
    scoped token (`populora token`), where its certificate does not name it. Read from $POPULORA_TOKEN (or the file
    $POPULORA_TOKEN_FILE names) when that is set. On a server it is the deployment-wide token, which opens every
    method of every service for whoever presents it: for a development setup on one machine only (the server says
    so in its log); no shipped deployment sets it."""
    tokens: dict[str, str | list[str]] = Field(default_factory=dict)
    """A server's scoped tokens: identity (populora.scopes.IDENTITIES) -> the VERIFIER of its token
    (`hmac-sha256:<salt>:<digest>`, made by `populora token`), or its verifiers while one token replaces another
    ([old, new]). Never a token: a server keeps no identity's token, so its files give none away. A call presenting a
    token may call only its identity's scope (docs/operations.md, Who may call what). With scoped tokens (or TLS),
    every call needs a credential, reads included. Never stored with a run."""
    token_path: str = ""
    """A file holding services.token, read again whenever it changes (a client's token replaced without a restart);
    overrides services.token."""
    tokens_path: str = ""
    """A YAML mapping like services.tokens (identity -> verifier or [verifiers]; `populora token new` writes
    token-verifiers.yaml) that a server reads again whenever it changes, merged over services.tokens: a rotation
    without a restart."""

    @model_validator(mode="before")
    @classmethod
    def _merge_endpoint_defaults(cls, data: Any) -> Any:
        # `--set services.evolver.metrics_port=9999` gives a partial endpoint; fill the rest from the defaults.
        if isinstance(data, dict):
            data = dict(data)
            for name, field_info in cls.model_fields.items():
                given = data.get(name)
                if isinstance(given, dict) and isinstance(field_info.default, ServiceEndpoint):
                    data[name] = {**field_info.default.model_dump(), **given}
        return data

    @model_validator(mode="after")
    def _placed_only(self) -> ServicesConfig:
        from populora.scopes import check_tokens

        check_tokens(self.tokens)
        for name in UNPLACED:
            ep = getattr(self, name)
            if ep.replicas or ep.resolve:
                raise ValueError(f"services.{name} has no adapters to place: replicas and resolve are for the "
                                 f"trainer and inference only (give {name} one host:port; a load-balancing name "
                                 "for the sandbox is fine)")
        return self


class StoreConfig(Section):
    root: str = "{output_dir}/store"
    """Artifact store directory (a shared volume in compose/k8s); `{output_dir}` is filled in."""
