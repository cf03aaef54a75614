"""TLS in the deployment files: every PopuLoRA container of the compose files and the Kubernetes overlays turns on
services.tls and gets the CA and its own identity's certificate and key only; no configuration says `insecure`;
Postgres requires TLS (hostssl only) and its clients check its certificate (verify-full); Redis has no plaintext
port, requires client certificates and knows only the ACL users; the coordinator reaches it over rediss://."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from populora.datastores import REDIS_COMMANDS
from tests.deploy.deployment import (
    COMPOSE_FILES,
    CONFIG_PATH,
    K8S,
    OVERLAYS,
    ROOT,
    SERVICES,
    by_kind,
    kustomize,
    only_env,
    pod_spec,
    rendered_compose,
)

POPULORA = (*SERVICES, "coordinator")
TLS_DIR = "/run/secrets/tls"
CA = f"{TLS_DIR}/ca.pem"


def _config(path: Path, env: dict[str, str]):
    from populora.config import load_config

    with only_env({k: str(v) for k, v in env.items()}):
        return load_config(path=path)


def _hba_lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _check_db_url(url: str, where: str) -> None:
    query = parse_qs(urlparse(url).query)
    assert query.get("sslmode") == ["verify-full"], f"{where}: the database URL must say sslmode=verify-full: {url}"
    assert query.get("sslrootcert") == [CA], f"{where}: the database URL must check against {CA}: {url}"


def test_no_configuration_says_insecure():
    files = [*COMPOSE_FILES, *(str(p.relative_to(ROOT)) for p in (ROOT / "configs").glob("*.yaml")),
             *(str(p.relative_to(ROOT)) for p in (ROOT / "deploy").rglob("*.yaml"))]
    for rel in files:
        text = (ROOT / rel).read_text()
        assert not re.search(r"^[^#]*\binsecure\s*:\s*true", text, re.M), f"{rel} says insecure: true"
        assert "--insecure" not in text, f"{rel} passes --insecure"
        assert not re.search(r"^[^#]*redis://", text, re.M), f"{rel}: a plaintext Redis URL"


# ---- Compose ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=COMPOSE_FILES)
def compose(request) -> tuple[str, dict]:
    return request.param, rendered_compose(request.param)


def _tls_secrets(doc: dict, svc: dict) -> dict[str, str]:
    """target under /run/secrets/tls -> the host file it comes from."""
    out = {}
    for s in svc.get("secrets", []):
        if isinstance(s, dict) and str(s.get("target", "")).startswith("tls/"):
            out[f"/run/secrets/{s['target']}"] = doc["secrets"][s["source"]]["file"]
    return out


def test_compose_services_present_their_own_identity_only(compose):
    file, doc = compose
    certs = ROOT / "certs"
    for name in (*POPULORA, "postgres", "redis"):
        svc = doc["services"][name]
        mounted = _tls_secrets(doc, svc)
        own = {f"{TLS_DIR}/{name}.pem": str(certs / f"{name}.pem"),
               f"{TLS_DIR}/{name}-key.pem": str(certs / f"{name}-key.pem")}
        if name != "postgres":  # Postgres checks no client certificate: it needs no CA
            own[CA] = str(certs / "ca.pem")
        assert mounted == own, f"{file}: {name} must get the CA and its own certificate and key only: {mounted}"
        if name in POPULORA:
            mounts = dict(reversed(v.split(":")[:2]) for v in svc["volumes"])
            env = {k: v for k, v in svc.get("environment", {}).items() if not k.endswith("_FILE")}
            cfg = _config(Path(mounts[CONFIG_PATH]), env)
            assert cfg.services.tls.enabled and cfg.services.tls.dir == TLS_DIR, f"{file}: {name} without TLS"
            assert not cfg.services.tls.insecure and not cfg.services.tls.identity, \
                f"{file}: {name} must present its own identity"
            _check_db_url(cfg.league.db_url, f"{file}: {name} (config)")
            env_url = svc.get("environment", {}).get("POPULORA__LEAGUE__DB_URL")
            if env_url:
                _check_db_url(env_url, f"{file}: {name} (environment)")


def test_compose_postgres_requires_tls(compose):
    file, doc = compose
    pg = doc["services"]["postgres"]
    command = " ".join(pg["command"])
    for setting in ("ssl=on", f"ssl_cert_file={TLS_DIR}/postgres.pem", "hba_file=/etc/postgresql-tls/pg_hba.conf"):
        assert setting in command, f"{file}: postgres must run with {setting}"
    mounts = dict(reversed(v.split(":")[:2]) for v in pg["volumes"])
    hba = _hba_lines(Path(mounts["/etc/postgresql-tls/pg_hba.conf"]).read_text())
    assert {line[0] for line in hba} == {"local", "hostssl"}, f"{file}: pg_hba.conf must have hostssl lines only"
    assert all(line[-1] == "scram-sha-256" for line in hba if line[0] == "hostssl")
    script = Path(mounts["/usr/local/bin/postgres-tls"]).read_text()
    assert f"{TLS_DIR}/postgres-key.pem" in script and "/run/postgres-tls/server.key" in command


def test_compose_redis_has_no_plaintext_port_and_acl_users(compose):
    file, doc = compose
    redis = doc["services"]["redis"]
    args = redis["command"]
    pairs = dict(zip(args[1::2], args[2::2], strict=False)) if args[0] == "redis-server" else {}
    assert pairs.get("--port") == "0" and pairs.get("--tls-port") == "6379", f"{file}: redis must listen on TLS only"
    assert pairs.get("--tls-auth-clients") == "yes", f"{file}: redis must require client certificates"
    assert pairs.get("--tls-ca-cert-file") == CA and pairs.get("--aclfile"), f"{file}: redis needs the CA and ACLs"
    sources = {s["source"]: s.get("target") for s in redis["secrets"] if isinstance(s, dict)}
    assert sources.get("redis_users") == "redis-users.acl"
    health = " ".join(redis["healthcheck"]["test"])
    assert "--tls" in health and "--user health" in health, f"{file}: the redis health check must use TLS"
    coordinator = doc["services"]["coordinator"]
    url = urlparse(coordinator["environment"]["POPULORA__QUEUE__REDIS_URL"])
    assert url.scheme == "rediss" and url.username == "coordinator" and url.hostname == "redis", \
        f"{file}: the coordinator must reach Redis over TLS as its ACL user"
    assert set(REDIS_COMMANDS) == {"coordinator", "health"}


# ---- Kubernetes -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request) -> tuple[str, list[dict]]:
    return request.param, kustomize(K8S / "overlays" / request.param)


def test_k8s_pods_mount_their_own_identity_only(overlay):
    name_, docs = overlay
    workloads = {d["metadata"]["name"]: d for d in docs if pod_spec(d) is not None}
    config = yaml.safe_load(by_kind(docs, "ConfigMap")["populora-config"]["data"]["config.yaml"])
    assert config["services"]["tls"] == {"enabled": True, "dir": TLS_DIR}, f"overlay {name_}: TLS is off"
    _check_db_url(config["league"]["db_url"], f"overlay {name_}: the ConfigMap")
    assert config["queue"]["redis_url"].startswith("rediss://coordinator@redis:")
    for name in (*POPULORA, "postgres", "redis"):
        spec = pod_spec(workloads[name])
        tls = [v for v in spec.get("volumes", []) if v.get("secret", {}).get("secretName", "").startswith("populora-tls-")]
        assert [v["secret"]["secretName"] for v in tls] == [f"populora-tls-{name}"], \
            f"overlay {name_}: {name} must mount its own TLS Secret only"
        mode = tls[0]["secret"].get("defaultMode")
        assert mode in (0o400, 0o440), f"overlay {name_}: {name}'s key is readable by others (mode {mode:o})"
        for c in spec["containers"]:
            mounts = [m for m in c.get("volumeMounts", []) if m["name"] == tls[0]["name"]]
            assert mounts == [{"name": tls[0]["name"], "mountPath": TLS_DIR, "readOnly": True}], \
                f"overlay {name_}: {name} must mount its TLS Secret read-only at {TLS_DIR}"
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                assert "grpc" not in c.get(probe, {}), f"overlay {name_}: {name}'s {probe} speaks no TLS"


def test_k8s_postgres_and_redis_require_tls(overlay):
    name_, docs = overlay
    workloads = {d["metadata"]["name"]: d for d in docs if pod_spec(d) is not None}
    (pg,) = pod_spec(workloads["postgres"])["containers"]
    args = " ".join(pg["args"])
    assert "ssl=on" in args and "hba_file=/etc/postgresql-tls/pg_hba.conf" in args
    hba = _hba_lines(by_kind(docs, "ConfigMap")["postgres-hba"]["data"]["pg_hba.conf"])
    assert {line[0] for line in hba} == {"local", "hostssl"}, f"overlay {name_}: pg_hba.conf must be hostssl only"
    (redis,) = pod_spec(workloads["redis"])["containers"]
    pairs = dict(zip(redis["args"][1::2], redis["args"][2::2], strict=False))
    assert pairs.get("--port") == "0" and pairs.get("--tls-auth-clients") == "yes" and pairs.get("--aclfile")
    for probe in ("readinessProbe", "livenessProbe"):
        assert "--tls" in " ".join(redis[probe]["exec"]["command"])
    acl = [v for v in pod_spec(workloads["redis"])["volumes"] if v.get("secret", {}).get("secretName") ==
           "populora-redis-acl"]
    assert acl, f"overlay {name_}: redis must mount the Secret populora-redis-acl"
    (coordinator,) = pod_spec(workloads["coordinator"])["containers"]
    assert any(e["name"] == "POPULORA__QUEUE__REDIS_URL" and "secretKeyRef" in e.get("valueFrom", {})
               for e in coordinator["env"]), f"overlay {name_}: the coordinator's Redis URL comes from the secret"
