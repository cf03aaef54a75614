"""Who holds which credential in the shipped deployments: every Compose file and every Kubernetes manifest (raw and
as the overlays render), read here, gives no container the deployment-wide token (services.token, which opens
every method: a development setup on one machine only); each service gets its own credentials alone (its
certificate, and where it uses Postgres the URL of its own database role, python -m coordinator.pgroles); the sandbox,
which runs model-written code, holds nothing that opens a method of any service and reaches Postgres as the role
that may only read the verifier registry, never with the owner's or any other role's URL; Postgres' superuser
password goes to Postgres and the one-off db-setup alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from coordinator import pgroles
from populora.contracts import CONTRACTS, SERVICE_NAMES
from populora.scopes import REST_OPERATIONS, allowed, rest_allowed
from tests.deploy.deployment import (
    COMPOSE_FILES,
    K8S,
    OVERLAYS,
    ROOT,
    SECRET_NAME,
    kustomize,
    pod_spec,
    rendered_compose,
)

# environment variables that hand a process services.token (the deployment-wide token on a server) or any token
TOKEN_VARIABLES = re.compile(r"^(POPULORA_TOKEN(_FILE)?|POPULORA__SERVICES__TOKENS?(_PATH)?(_FILE)?)$")
# the role of each database URL a service is given (the user part of the URL)
ROLE_OF_SERVICE = {"league": {"populora_league", "populora_reader"}, "coordinator": {"populora_coordinator"},
                   "sandbox": {"populora_sandbox"}}
# the keys of populora-secrets each Kubernetes workload may reference
K8S_KEYS = {"league": {"league-db-url", "reader-db-url"}, "coordinator": {"coordinator-db-url", "redis-url"},
            "sandbox": {"sandbox-db-url"}, "inference": set(), "trainer": set(), "evolver": set(),
            "postgres": {"postgres-password"}, "redis": set(),
            "db-setup": {"admin-db-url", "league-db-url", "reader-db-url", "sandbox-db-url", "coordinator-db-url"}}


def _deployment_files() -> list[Path]:
    files = [ROOT / f for f in COMPOSE_FILES] + sorted(K8S.rglob("*.yaml"))
    files += [ROOT / "deploy" / "compose" / "cpu-distributed.yaml", *sorted((ROOT / "configs").glob("gpu-*.yaml"))]
    assert len(files) > 15, files
    return files


def _configs(path: Path, doc) -> list[dict]:
    """The PopuLoRA configurations in one YAML document of `path`: the document itself for a config file, the
    config.yaml of a ConfigMap."""
    if path.parent.name in ("compose", "configs"):
        return [doc]
    if not isinstance(doc, dict) or doc.get("kind") != "ConfigMap":
        return []
    found = [yaml.safe_load(v) for v in (doc.get("data") or {}).values()]
    return [c for c in found if isinstance(c, dict) and "run" in c]


def _users(text: str) -> set[str]:
    """The users of every postgresql URL in `text`."""
    return set(re.findall(r"postgresql\+psycopg://([A-Za-z0-9_]+)[:@]", text))


@pytest.mark.parametrize("path", _deployment_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_deployment_file_hands_out_a_token(path):
    """No environment variable, Compose secret or Kubernetes secret key of a token; no configuration that sets
    services.token, services.token_path or scoped tokens: every caller is named by its certificate."""
    text = path.read_text()
    assert not re.search(r"POPULORA_TOKEN|POPULORA__SERVICES__TOKEN", text), f"{path}: a token is handed out"
    assert not re.search(r"(?m)^\s*-?\s*\{?\s*(key|source|name):\s*\"?(populora_)?token\"?\s*[,}]?\s*$", text), \
        f"{path}: a secret named token"
    for doc in yaml.safe_load_all(text):
        for cfg in _configs(path, doc):
            services = cfg.get("services") or {}
            assert not {"token", "token_path", "tokens", "tokens_path"} & set(services), \
                f"{path}: the configuration sets a token ({sorted(set(services) & {'token', 'tokens'})})"


def test_the_sandboxs_certificate_opens_nothing():
    for service in SERVICE_NAMES:
        assert not [m.name for m in CONTRACTS[service].methods if allowed("sandbox", service, m.name)]
        assert not [op for op in REST_OPERATIONS.get(service, {}) if rest_allowed("sandbox", service, op)]


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_compose_gives_each_service_its_own_credentials_and_the_sandbox_none_that_writes(file):
    doc = rendered_compose(file)
    services = doc["services"]
    for name, svc in services.items():
        env = {k: str(v) for k, v in (svc.get("environment") or {}).items()}
        tokens = [k for k in env if TOKEN_VARIABLES.match(k)]
        assert not tokens, f"{file}: {name} gets {tokens}"
        secrets = {s["source"] if isinstance(s, dict) else s for s in svc.get("secrets", [])}
        identities = {m.group(1) for s in secrets if (m := re.fullmatch(r"tls_(\w+?)_(cert|key)", s))}
        assert identities <= {name}, f"{file}: {name} gets the certificates of {sorted(identities - {name})}"
        users = _users(" ".join(env.values()))
        if name == "db-setup":
            assert users == {"populora", *ROLE_OF_SERVICE["league"], *ROLE_OF_SERVICE["coordinator"]}, users
        elif name != "postgres":
            assert users == ROLE_OF_SERVICE.get(name, set()) - {"populora_sandbox"}, \
                f"{file}: {name} gets the database URLs of {sorted(users)}"
        if name not in ("postgres", "db-setup"):
            assert not [k for k, v in env.items() if "PASSWORD" in k or "dummy-pg-password" in v], \
                f"{file}: {name} gets Postgres' superuser password"
    sandbox = services["sandbox"]
    env = {k: str(v) for k, v in sandbox["environment"].items()}
    secrets = {s["source"] if isinstance(s, dict) else s for s in sandbox["secrets"]}
    assert secrets == {"sandbox_db_url", "tls_ca", "tls_sandbox_cert", "tls_sandbox_key"}, secrets
    assert [k for k in env if "DB_URL" in k] == ["POPULORA__SANDBOX__DB_URL_FILE"], env
    assert env["POPULORA__SANDBOX__DB_URL_FILE"] == "/run/secrets/sandbox_db_url"
    # the file is the one db-setup makes the sandbox's role from: SELECT on the verifier registry, nothing else
    setup = {k: str(v) for k, v in services["db-setup"]["environment"].items()}
    assert setup["POPULORA_PG_SANDBOX_URL_FILE"] == "/run/secrets/sandbox_db_url"
    assert {s["source"] if isinstance(s, dict) else s for s in services["db-setup"]["secrets"]} == \
        {"sandbox_db_url", "tls_ca"}
    assert doc["secrets"]["sandbox_db_url"]["file"].endswith("/sandbox_db_url")
    # the URLs db-setup gives each role are the ones each service gets
    assert setup["POPULORA_PG_LEAGUE_URL"] == str(services["league"]["environment"]["POPULORA__LEAGUE__DB_URL"])
    assert setup["POPULORA_PG_READER_URL"] == str(services["league"]["environment"]["POPULORA__LEAGUE__READ_DB_URL"])
    assert setup["POPULORA_PG_COORDINATOR_URL"] == \
        str(services["coordinator"]["environment"]["POPULORA__LEAGUE__DB_URL"])
    assert sorted(k.removeprefix("POPULORA_PG_").removesuffix("_URL").removesuffix("_URL_FILE").lower()
                  for k in setup if k.startswith("POPULORA_PG_") and k != "POPULORA_PG_ADMIN_URL") == \
        sorted(pgroles.ROLES)


def _secret_keys(spec: dict) -> tuple[set[str], list[str]]:
    """The keys of populora-secrets a pod references (environment and volumes), and every environment variable."""
    keys, names = set(), []
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        for var in c.get("env", []):
            names.append(var["name"])
            ref = (var.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                assert ref["name"] == SECRET_NAME, ref
                keys.add(ref["key"])
    for volume in spec.get("volumes", []):
        secret = volume.get("secret") or {}
        if secret.get("secretName") == SECRET_NAME:
            items = secret.get("items")
            assert items, f"{volume['name']}: mounts every key of {SECRET_NAME}"
            keys |= {i["key"] for i in items}
    return keys, names


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubernetes_gives_each_pod_its_own_credentials_and_the_sandbox_none_that_writes(overlay):
    docs = kustomize(K8S / "overlays" / overlay)
    seen = set()
    for doc in docs:
        spec = pod_spec(doc)
        if spec is None:
            continue
        name = doc["metadata"]["name"]
        seen.add(name)
        keys, names = _secret_keys(spec)
        assert keys == K8S_KEYS[name], f"overlay {overlay}: {name} references {sorted(keys)}"
        assert not [n for n in names if TOKEN_VARIABLES.match(n)], f"overlay {overlay}: {name} gets a token"
        tls = {v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v
               and v["secret"]["secretName"].startswith("populora-tls-")}
        if name == "db-setup":  # the CA alone
            assert [v["secret"]["items"] for v in spec["volumes"]] == [[{"key": "ca.pem", "path": "ca.pem"}]]
        else:
            assert tls == {f"populora-tls-{name}"}, f"overlay {overlay}: {name} mounts {sorted(tls)}"
    assert seen == set(K8S_KEYS), seen
    sandbox = next(pod_spec(d) for d in docs if d["metadata"]["name"] == "sandbox" and pod_spec(d))
    for c in sandbox["containers"] + sandbox["initContainers"]:
        assert not [v for v in c.get("env", []) if "valueFrom" in v], "a secret in the sandbox's environment"
        for var in c.get("env", []):
            assert var["name"] in ("POPULORA__SANDBOX__DB_URL_FILE",) or "DB_URL" not in var["name"], var
    setup = next(pod_spec(d) for d in docs if d["metadata"]["name"] == "db-setup")
    refs = {v["name"]: v["valueFrom"]["secretKeyRef"]["key"] for v in setup["containers"][0]["env"]}
    assert refs["POPULORA_PG_SANDBOX_URL"] == "sandbox-db-url"  # the role setup gives the registry's SELECT alone
    assert sorted(k.removeprefix("POPULORA_PG_").removesuffix("_URL").lower() for k in refs) == \
        sorted(["admin", *pgroles.ROLES])
