"""Who holds which credential in the shipped deployments: every Compose file, Kubernetes manifest (raw and as the
overlays render) and PopuLoRA configuration of the tree, found here by what each file holds rather than listed, gives
no container the deployment-wide token (services.token, which opens every method: a development setup on one machine
only); each service gets its own credentials alone (its certificate, and where it uses Postgres the URL of its own
database role, python -m coordinator.pgroles); the sandbox, which runs model-written code, holds nothing that opens a
method of any service and reaches Postgres as the role that may only read the verifier registry, never with the
owner's or any other role's URL; Postgres' superuser password goes to Postgres and the one-off db-setup alone. And
docs/operations.md's credentials table ("Who holds what, in the shipped files") is what these files give each
container, in each Compose file and each overlay."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from coordinator import pgroles
from populora.config import Config
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


def _yaml_files() -> list[Path]:
    """Every YAML file of the tree (tracked, or new and not ignored) but the records of runs (runs/, docs/results/)."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.yaml", "*.yml"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return sorted(ROOT / f for f in out.stdout.splitlines()
                  if (ROOT / f).is_file() and not f.startswith(("runs/", "docs/results/")))


def _what(path: Path) -> str:
    """What a YAML file is: "compose" (services with an image or a build), "kubernetes" (objects with an apiVersion
    and a kind), "config" (a PopuLoRA configuration: its sections only), or "" (anything else)."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    if any(isinstance(d.get("services"), dict) and any(isinstance(s, dict) and ("image" in s or "build" in s)
                                                       for s in d["services"].values()) for d in docs):
        return "compose"
    if any("apiVersion" in d and "kind" in d for d in docs):
        return "kubernetes"
    if docs and all(set(d) <= set(Config.model_fields) for d in docs):
        return "config"
    return ""


def _deployment_files() -> list[Path]:
    files = [f for f in _yaml_files() if _what(f)]
    assert len(files) > 15, files
    return files


def test_every_compose_and_kubernetes_file_of_the_tree_is_checked():
    """A Compose file or a Kubernetes overlay added anywhere must be one the tests below render and check."""
    found: dict[str, set[str]] = {}
    for path in _yaml_files():
        found.setdefault(_what(path), set()).add(str(path.relative_to(ROOT)))
    assert found["compose"] == set(COMPOSE_FILES), found["compose"]
    outside = {f for f in found["kubernetes"] if not (ROOT / f).is_relative_to(K8S)}
    assert not outside, f"Kubernetes manifests outside {K8S.relative_to(ROOT)}: {sorted(outside)}"
    overlays = {p.parent.name for p in (K8S / "overlays").glob("*/kustomization.yaml")}
    assert overlays == set(OVERLAYS), overlays
    assert {"configs/gpu-7b-4t4s.yaml", "deploy/compose/cpu-distributed.yaml"} <= found["config"], found["config"]


def _configs(path: Path, doc) -> list[dict]:
    """The PopuLoRA configurations in one YAML document of `path`: the document itself for a config file, the
    config.yaml of a ConfigMap."""
    if _what(path) == "config":
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


# ------------------------------------------------------------------- docs/operations.md's table against the files
OPERATIONS = ROOT / "docs" / "operations.md"


@dataclass(frozen=True)
class Holds:
    """What one container holds: the identities whose certificate and key it gets, the database users of the URLs
    it gets, the Redis users of its Redis URLs, whether it gets Postgres' superuser password and Redis' ACL file."""
    identities: frozenset[str]
    db_users: frozenset[str]
    redis_users: frozenset[str] = frozenset()
    postgres_password: bool = False
    redis_acl: bool = False


def _ticked(text: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", text))


def documented_holdings() -> dict[str, Holds]:
    """docs/operations.md's credentials table, container -> what it holds. A row may name several containers (each
    then holds "its own" certificate); "every role's URL" is every database user another row names."""
    text = OPERATIONS.read_text()
    lines = text[text.index("**Who holds what, in the shipped files**"):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    assert rows and all(len(r) == 4 for r in rows), rows
    every_user = set().union(*(_ticked(r[2]) for r in rows))
    out = {}
    for containers, certificate, role, other in rows:
        for name in re.sub(r"\(.*?\)", "", containers).split(","):
            name = name.strip()
            identities = ({name} if certificate.startswith("its own") else set() if certificate.startswith("none")
                          else _ticked(certificate))
            users = _ticked(role) | (every_user if "every role" in role else set())
            assert name not in out, f"the table names {name} twice"
            out[name] = Holds(frozenset(identities), frozenset(users),
                              frozenset(re.findall(r"Redis' `(\w+)` user", other)),
                              "superuser's password" in other, "ACL file" in other)
    return out


def _written_users() -> tuple[dict[str, str], dict[str, str]]:
    """The database user of each secret the documented commands write: Compose's secret files (secrets/NAME) and
    the keys of Kubernetes' populora-secrets (KEY -> user; postgres-password -> the superuser, redis-url -> Redis'
    user, each marked)."""
    text = OPERATIONS.read_text()
    files = dict((name, user) for user, name in
                 re.findall(r"postgresql\+psycopg://(\w+):[^\n]*\n\s*> secrets/(\w+)", text))
    keys = {key: user for key, user in re.findall(r'--from-literal=([\w-]+)="\$\(db (\w+) ', text)}
    keys |= {key: f"redis:{user}" for key, user in re.findall(r'--from-literal=([\w-]+)="rediss://(\w+):', text)}
    keys |= {key: "postgres-password" for key in re.findall(r"--from-literal=(postgres-password)=", text)}
    return files, keys


def _redis_users(text: str) -> set[str]:
    return set(re.findall(r"rediss?://(\w+):", text))


def compose_holdings(file: str) -> dict[str, Holds]:
    files, _ = _written_users()
    out = {}
    for name, svc in rendered_compose(file)["services"].items():
        env = " ".join(str(v) for v in (svc.get("environment") or {}).values())
        secrets = {s["source"] if isinstance(s, dict) else s for s in svc.get("secrets", [])}
        identities = {m.group(1) for s in secrets if (m := re.fullmatch(r"tls_(\w+)_key", s))}
        users = _users(env) | {files[s] for s in secrets if s in files}
        out[name] = Holds(frozenset(identities), frozenset(users), frozenset(_redis_users(env)),
                          "POSTGRES_PASSWORD" in (svc.get("environment") or {}), "redis_users" in secrets)
    return out


def kubernetes_holdings(overlay: str) -> dict[str, Holds]:
    _, keys = _written_users()
    out = {}
    for doc in kustomize(K8S / "overlays" / overlay):
        spec = pod_spec(doc)
        if spec is None:
            continue
        held, _ = _secret_keys(spec)
        assert held <= set(keys), f"{doc['metadata']['name']} references keys no documented command writes"
        identities = set()
        for volume in spec.get("volumes", []):
            secret = (volume.get("secret") or {}).get("secretName", "")
            if secret.startswith("populora-tls-"):
                identity = secret.removeprefix("populora-tls-")
                mounted = {i["key"] for i in volume["secret"].get("items") or [{"key": f"{identity}-key.pem"}]}
                if f"{identity}-key.pem" in mounted:
                    identities.add(identity)
        volumes = {(v.get("secret") or {}).get("secretName") for v in spec.get("volumes", [])}
        values = [keys[k] for k in held]
        out[doc["metadata"]["name"]] = Holds(
            frozenset(identities), frozenset(v for v in values if ":" not in v and v != "postgres-password"),
            frozenset(v.removeprefix("redis:") for v in values if v.startswith("redis:")),
            "postgres-password" in values, "populora-redis-acl" in volumes)
    return out


def _differences(documented: dict[str, Holds], shipped: dict[str, Holds]) -> list[str]:
    wrong = [f"{name}: in the table only" for name in sorted(set(documented) - set(shipped))]
    wrong += [f"{name}: not in the table" for name in sorted(set(shipped) - set(documented))]
    for name in sorted(set(documented) & set(shipped)):
        if documented[name] != shipped[name]:
            wrong.append(f"{name}: the table says {documented[name]}, the files give {shipped[name]}")
    return wrong


def test_the_documented_commands_write_each_secret_the_files_use():
    files, keys = _written_users()
    assert files == {"sandbox_db_url": "populora_sandbox"}, files
    assert keys == {"postgres-password": "postgres-password", "admin-db-url": "populora",
                    "league-db-url": "populora_league", "reader-db-url": "populora_reader",
                    "sandbox-db-url": "populora_sandbox", "coordinator-db-url": "populora_coordinator",
                    "redis-url": "redis:coordinator"}, keys


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_the_credentials_table_is_what_compose_gives(file):
    assert _differences(documented_holdings(), compose_holdings(file)) == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_credentials_table_is_what_kubernetes_gives(overlay):
    assert _differences(documented_holdings(), kubernetes_holdings(overlay)) == []


def test_a_wrong_table_fails():
    """The comparison sees a changed row: the sandbox given the league's role, or the dashboard's certificate."""
    shipped = compose_holdings(COMPOSE_FILES[0])
    documented = documented_holdings()
    for name, changed in [("sandbox", Holds(documented["sandbox"].identities,
                                            documented["sandbox"].db_users | {"populora_league"})),
                          ("league", Holds(documented["league"].identities | {"dashboard"},
                                           documented["league"].db_users))]:
        assert _differences({**documented, name: changed}, shipped) == \
            [f"{name}: the table says {changed}, the files give {shipped[name]}"]
