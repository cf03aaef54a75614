"""Readers of the deployment files for the tests: compose files rendered by docker-compose, kustomize overlays
rendered here (and by kubectl when it is installed), and one consistency check of a container against the CLI
and the config schema, shared by compose and Kubernetes."""

from __future__ import annotations

import copy
import fnmatch
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
COMPOSE_FILES = ("docker-compose.yml", "docker-compose.cpu.yml")
OVERLAYS = ("cpu", "gpu")
SERVICES = ("inference", "trainer", "league", "sandbox", "evolver")
REST_SERVICES = ("league", "sandbox")
CONFIG_PATH = "/etc/populora/config.yaml"
SECRET_NAME = "populora-secrets"
# Stand-ins for secret values, so files can be rendered and configs loaded without real secrets.
DUMMY_SECRETS = {"POSTGRES_PASSWORD": "dummy-pg-password", "LEAGUE_DB_PASSWORD": "dummy-league-password",
                 "READER_DB_PASSWORD": "dummy-reader-password", "COORDINATOR_DB_PASSWORD": "dummy-coordinator-password",
                 "REDIS_PASSWORD": "dummy-redis-password"}
_DB = "@postgres:5432/populora?sslmode=verify-full&sslrootcert=/run/secrets/tls/ca.pem"
SECRET_PLACEHOLDERS = {"POPULORA__LEAGUE__DB_URL": f"postgresql+psycopg://populora_league:dummy{_DB}",
                       "POPULORA__LEAGUE__READ_DB_URL": f"postgresql+psycopg://populora_reader:dummy{_DB}",
                       "POPULORA__SANDBOX__DB_URL": f"postgresql+psycopg://populora_sandbox:dummy{_DB}",
                       "POPULORA__QUEUE__REDIS_URL": "rediss://coordinator:dummy@redis:6379/0"}
INSTALL = {
    "docker-compose": "install Debian's docker-compose package: `make apt` (as root) or "
                      "`apt-get install -y docker-compose`",
    "kubernetes-validate": "install it into the venv: `.venv/bin/pip install -c constraints.txt kubernetes-validate` "
                           "(it is in the dev extra: `make install`)",
}
CLUSTER_SCOPED = {"Namespace", "RuntimeClass", "PersistentVolume", "ClusterRole", "ClusterRoleBinding",
                  "StorageClass", "PriorityClass"}
WORKLOADS = {"Deployment", "StatefulSet", "Job", "DaemonSet"}


def tool(name: str) -> str:
    """Path of a validation tool; a missing tool fails the test (never skips) and says how to install it."""
    venv_bin = Path(sys.executable).parent / name
    found = str(venv_bin) if venv_bin.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"`{name}` is not installed; {INSTALL[name]}")
    return found


# ---- the build context ------------------------------------------------------------------------------------------

def dockerignore() -> list[str]:
    return [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]


def ignored(path: str) -> bool:
    """As Docker reads .dockerignore: the last pattern that matches decides, `!PATTERN` re-includes."""
    verdict = False
    for line in dockerignore():
        keep, p = line.startswith("!"), line.removeprefix("!")
        if (fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path, p.removeprefix("**/"))
                or path.startswith(p.rstrip("/") + "/")):
            verdict = not keep
    return verdict


def build_context() -> Iterator[Path]:
    """The files `docker build .` sends from this checkout: everything but what .dockerignore excludes."""
    for dirpath, dirnames, filenames in os.walk(ROOT):
        here = Path(dirpath).relative_to(ROOT)
        dirnames[:] = [d for d in dirnames if not ignored(str(here / d))]
        yield from (ROOT / here / f for f in filenames if not ignored(str(here / f)))


# ---- docker compose -------------------------------------------------------------------------------------------

def compose_config(*files: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`docker-compose -f FILE... config` in the repository root, with dummy secrets in the environment."""
    cmd = [tool("docker-compose")]
    for f in files:
        cmd += ["-f", f]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("POPULORA")}
    full_env.update(DUMMY_SECRETS if env is None else env)
    return subprocess.run([*cmd, "config"], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=60)


@functools.cache
def rendered_compose_text(file: str) -> str:
    out = compose_config(file)
    assert out.returncode == 0, f"docker-compose -f {file} config failed:\n{out.stderr}"
    return out.stdout


def rendered_compose(file: str) -> dict[str, Any]:
    """The file as docker-compose resolves it (anchors merged, variables filled with dummy secrets)."""
    return yaml.safe_load(rendered_compose_text(file))


def raw_compose(file: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / file).read_text())


# ---- kustomize ------------------------------------------------------------------------------------------------

def _load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ValueError(f"JSON pointer must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc: Any, key: str) -> Any:
    return doc[int(key)] if isinstance(doc, list) else doc[key]


def json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """Apply RFC 6902 add / replace / remove operations in place (the subset our overlays use)."""
    for op in ops:
        *parents, last = _pointer(op["path"])
        target = doc
        for key in parents:
            target = _container(target, key)
        kind = op["op"]
        if kind == "add":
            if isinstance(target, list):
                target.insert(len(target) if last == "-" else int(last), copy.deepcopy(op["value"]))
            else:
                target[last] = copy.deepcopy(op["value"])
        elif kind == "replace":
            _container(target, last)  # must exist (KeyError / IndexError otherwise)
            if isinstance(target, list):
                target[int(last)] = copy.deepcopy(op["value"])
            else:
                target[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            del target[int(last) if isinstance(target, list) else last]
        else:
            raise ValueError(f"JSON patch op {kind!r} is not supported by this renderer")


KUSTOMIZATION_FIELDS = {"apiVersion", "kind", "resources", "namespace", "images", "patches"}


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """Render a kustomization: resources, JSON 6902 patches with a kind/name target, images, namespace.

    Only the fields above are understood; any other field fails loudly, so the tests never validate something
    other than what `kubectl apply -k` would apply.
    """
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(spec) - KUSTOMIZATION_FIELDS
    assert not unknown, f"{directory}/kustomization.yaml: fields {sorted(unknown)} unknown to the test renderer"
    docs: list[dict[str, Any]] = []
    for res in spec.get("resources", []):
        path = (directory / res).resolve()
        docs += kustomize(path) if path.is_dir() else _load_docs(path)
    for patch in spec.get("patches", []):
        ops = yaml.safe_load((directory / patch["path"]).read_text())
        target = patch["target"]
        hits = [d for d in docs if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]]
        assert hits, f"{directory}: patch {patch['path']} matches no {target['kind']}/{target['name']}"
        for d in hits:
            json_patch(d, ops)
    for image in spec.get("images", []):
        for container in (c for d in docs for c in pod_containers(d)):
            name, _, tag = container["image"].partition(":")
            if name == image["name"]:
                container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"
    if "namespace" in spec:
        for d in docs:
            if d["kind"] not in CLUSTER_SCOPED:
                d["metadata"]["namespace"] = spec["namespace"]
    return docs


def kubectl_kustomize(directory: Path) -> list[dict[str, Any]] | None:
    """The same rendering by `kubectl kustomize`, when kubectl is installed (a cross-check of `kustomize`)."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return None
    out = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"kubectl kustomize {directory} failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc["kind"] in WORKLOADS:
        return doc["spec"]["template"]["spec"]
    return None


def pod_containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(doc)
    return [] if spec is None else spec.get("containers", []) + spec.get("initContainers", [])


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


# ---- one container against the CLI and the config schema ----------------------------------------------------

@dataclass
class Container:
    """What a deployment file says about one populora container."""

    where: str                        # e.g. "docker-compose.yml: services.league"
    name: str                         # compose service / Kubernetes workload name
    argv: list[str]                   # the command line
    env: dict[str, str]               # environment, secrets replaced by stand-ins
    config_file: Path                 # the file mounted at /etc/populora/config.yaml, on this machine
    ports: set[int] = field(default_factory=set)         # ports the container exposes
    health_ports: list[int] = field(default_factory=list)  # ports its gRPC health checks ask


def config_field_paths() -> set[str]:
    """Dotted paths of every leaf field of populora.config.Config (what POPULORA__* may set)."""
    from populora.config import Config, field_docs

    paths = set(field_docs(Config))
    sections = {p.rsplit(".", 1)[0] for p in paths if "." in p}
    return paths - sections


def env_field(name: str) -> str:
    """POPULORA__SECTION__FIELD (or ..._FILE, its value from a file) -> section.field (as populora.config reads it)."""
    return ".".join(p.lower() for p in name[len("POPULORA__"):].removesuffix("_FILE").split("__"))


@contextmanager
def secret_files(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The environment with every NAME_FILE of a secret pointing to a file that holds NAME's stand-in value (the
    files the container gets exist only there)."""
    out = dict(env)
    with tempfile.TemporaryDirectory() as d:
        for name in env:
            target = name.removesuffix("_FILE")
            if name.endswith("_FILE") and target in SECRET_PLACEHOLDERS:
                path = Path(d) / target
                path.write_text(SECRET_PLACEHOLDERS[target] + "\n")
                out[name] = str(path)
        yield out


@contextmanager
def only_env(env: dict[str, str]) -> Iterator[None]:
    """The process environment as a container would see it: no POPULORA* variables but these."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith("POPULORA")}
    with mock.patch.dict(os.environ, {**keep, **env}, clear=True):
        yield


def check_container(c: Container):
    """Every claim a deployment file makes about a populora container, checked against the real CLI parser
    (coordinator.cli.build_parser) and config schema (populora.config); returns the effective Config."""
    from coordinator.cli import build_parser
    from populora.config import ConfigError, load_config

    assert c.argv and c.argv[0] == "populora", f"{c.where}: command must start with `populora`, got {c.argv}"
    try:
        args = build_parser().parse_args(c.argv[1:])
    except SystemExit:
        pytest.fail(f"{c.where}: `{' '.join(c.argv)}` is not a valid populora command line")
    if c.name == "coordinator":
        assert args.command == "train" and "distributed" in args.mode, \
            f"{c.where}: the coordinator must run `populora train ... --mode distributed`"
    else:
        assert args.command == "serve" and args.service == c.name, \
            f"{c.where}: expected `populora serve {c.name}`, got {c.argv}"
    assert args.config_file == CONFIG_PATH, f"{c.where}: expected --config {CONFIG_PATH}"
    assert c.env.get("POPULORA_CONFIG") == CONFIG_PATH, f"{c.where}: POPULORA_CONFIG must be {CONFIG_PATH}"

    fields = config_field_paths()
    for name in c.env:
        if name.startswith("POPULORA__"):
            assert env_field(name) in fields, \
                f"{c.where}: {name} sets '{env_field(name)}', which is no field of populora.config.Config"
    with secret_files(c.env) as env, only_env(env):
        try:
            cfg = load_config(path=c.config_file, overrides=args.overrides)
        except ConfigError as e:
            pytest.fail(f"{c.where}: the configuration it would run with is invalid:\n{e}")

    assert cfg.run.deployment == "distributed", f"{c.where}: run.deployment must be distributed"
    assert cfg.queue.backend == "redis" and urlparse(cfg.queue.redis_url).hostname == "redis", \
        f"{c.where}: the queue must be Redis Streams on the redis service ({cfg.queue.redis_url})"
    db = urlparse(cfg.league_db_url)
    assert db.scheme.startswith("postgresql") and db.hostname == "postgres", \
        f"{c.where}: the league database must be the postgres service ({db.scheme}://{db.hostname})"
    for svc in SERVICES:
        assert getattr(cfg.services, svc).host == svc, \
            f"{c.where}: services.{svc}.host is {getattr(cfg.services, svc).host!r}, not the service name"
    assert str(cfg.store_root).startswith("/data/"), f"{c.where}: store.root must be on the shared /data volume"

    if args.command == "serve":
        endpoint = getattr(cfg.services, c.name)
        grpc_port = args.port or endpoint.port
        http_port = endpoint.rest_port if c.name in REST_SERVICES else endpoint.metrics_port
        assert http_port, f"{c.where}: services.{c.name} has no port for /metrics"
        missing = {grpc_port, http_port} - c.ports
        assert not missing, f"{c.where}: ports {sorted(missing)} (gRPC / metrics or REST) are not exposed"
        assert c.health_ports, f"{c.where}: no gRPC health check"
        assert set(c.health_ports) == {grpc_port}, \
            f"{c.where}: health checks ask port(s) {c.health_ports}, the gRPC server listens on {grpc_port}"
        assert c.env.get("POPULORA_SERVICE") == c.name, f"{c.where}: POPULORA_SERVICE must be {c.name}"
    return cfg
