"""docker-compose.yml and docker-compose.cpu.yml: valid for docker-compose, and consistent with the CLI, the config
schema, the health checks and the isolation the sandbox needs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from services.sandbox.jail import CONTAINER_CAPABILITIES
from tests.deploy.deployment import (
    COMPOSE_FILES,
    CONFIG_PATH,
    DUMMY_SECRETS,
    ROOT,
    SERVICES,
    Container,
    build_context,
    check_container,
    compose_config,
    ignored,
    raw_compose,
    rendered_compose,
    rendered_compose_text,
)

POPULORA = (*SERVICES, "coordinator")
TLS_NAMES = (*POPULORA, "postgres", "redis")  # who gets a certificate of `populora certs`
SANDBOX_PEERS = {"sandbox", "coordinator", "league", "postgres"}


@pytest.fixture(scope="module", params=COMPOSE_FILES)
def compose(request) -> tuple[str, dict]:
    return request.param, rendered_compose(request.param)


def _script_defaults() -> dict[str, str]:
    """NAME=${NAME:-default} lines of scripts/docker_common.sh: the image names `make images` builds and pulls."""
    text = (ROOT / "scripts" / "docker_common.sh").read_text()
    found = dict(re.findall(r"^(\w+)=\$\{\1:-([^}]+)\}$", text, re.M))
    found.update(re.findall(r"^(PUBLIC_\w+_IMAGE)=(\S+)$", text, re.M))
    return found


@pytest.mark.parametrize("file, variant", [("docker-compose.yml", "cuda"), ("docker-compose.cpu.yml", "cpu")])
def test_rendering_gives_the_whole_system(file, variant):
    """docker-compose renders the file (anchors merged, variables filled) into exactly the system: the five services,
    the coordinator, Postgres, Redis and db-setup (the database roles); the project image `make images` builds, built
    from this checkout; the public Postgres and Redis images `make images` pulls; the volumes, networks and secret
    files; and the secrets given in the environment reach the services that take them, each its own."""
    doc = rendered_compose(file)
    defaults = _script_defaults()
    services = doc["services"]
    assert set(services) == set(POPULORA) | {"postgres", "redis", "db-setup"}, f"{file}: {sorted(services)}"
    assert set(doc["volumes"]) == {"data", "pgdata", "redisdata"}, f"{file}: volumes {sorted(doc['volumes'])}"
    assert set(doc["networks"]) == {"backend", "sandbox"} and doc["networks"]["sandbox"].get("internal") is True
    tls = {f"tls_{n}_{kind}": {"file": str(ROOT / "certs" / f"{n}{suffix}.pem")} for n in TLS_NAMES
           for kind, suffix in (("cert", ""), ("key", "-key"))}
    assert doc["secrets"] == {**{name: {"file": str(ROOT / "secrets" / path)} for name, path in
                                 (("sandbox_db_url", "sandbox_db_url"), ("redis_users", "redis-users.acl"))},
                              "tls_ca": {"file": str(ROOT / "certs" / "ca.pem")}, **tls}, doc["secrets"]
    image = f"{defaults['POPULORA_IMAGE']}:{defaults['POPULORA_TAG']}-{variant}"
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M).group(1)
    for name in (*POPULORA, "db-setup"):
        svc = services[name]
        assert svc["image"] == image, f"{file}: {name} runs {svc['image']}, `make images` builds {image}"
        assert svc["build"] == {"context": str(ROOT), "args": {"VARIANT": variant, "BASE_IMAGE": base}}, \
            f"{file}: {name} build {svc['build']}"
        assert svc["restart"] == ("no" if name in ("coordinator", "db-setup") else "unless-stopped"), \
            f"{file}: {name} restart"
        if name == "db-setup":
            continue
        config = [v for v in svc["volumes"] if v.endswith(f":{CONFIG_PATH}:ro")]
        assert len(config) == 1 and Path(config[0].split(":")[0]).is_file(), \
            f"{file}: {name} must mount one config file of this checkout read-only at {CONFIG_PATH}"
    env = {name: {k: str(v) for k, v in services[name]["environment"].items()}
           for name in ("league", "coordinator", "db-setup")}
    db = "@postgres:5432/populora?sslmode=verify-full&sslrootcert=/run/secrets/tls/ca.pem"
    league = f"postgresql+psycopg://populora_league:{DUMMY_SECRETS['LEAGUE_DB_PASSWORD']}{db}"
    reader = f"postgresql+psycopg://populora_reader:{DUMMY_SECRETS['READER_DB_PASSWORD']}{db}"
    coordinator = f"postgresql+psycopg://populora_coordinator:{DUMMY_SECRETS['COORDINATOR_DB_PASSWORD']}{db}"
    assert (env["league"]["POPULORA__LEAGUE__DB_URL"], env["league"]["POPULORA__LEAGUE__READ_DB_URL"]) == (league, reader)
    assert env["coordinator"]["POPULORA__LEAGUE__DB_URL"] == coordinator
    assert env["db-setup"] == {"POPULORA_LOG_JSON": "1", "POPULORA_PG_LEAGUE_URL": league, "POPULORA_PG_READER_URL": reader,
                               "POPULORA_PG_COORDINATOR_URL": coordinator,
                               "POPULORA_PG_SANDBOX_URL_FILE": "/run/secrets/sandbox_db_url",
                               "POPULORA_PG_ADMIN_URL": f"postgresql+psycopg://populora:{DUMMY_SECRETS['POSTGRES_PASSWORD']}{db}"}
    for name in ("league", "sandbox", "coordinator"):
        assert services[name]["depends_on"]["db-setup"] == {"condition": "service_completed_successfully"}, name
    assert services["postgres"]["image"] == defaults["PUBLIC_POSTGRES_IMAGE"]
    assert services["redis"]["image"] == defaults["PUBLIC_REDIS_IMAGE"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == DUMMY_SECRETS["POSTGRES_PASSWORD"]
    assert "${" not in rendered_compose_text(file), f"{file}: a variable was left unfilled"


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_secrets_are_required_not_stored(file):
    """Without any of the passwords the file refuses to render: no default secret values."""
    for missing in DUMMY_SECRETS:
        env = {k: v for k, v in DUMMY_SECRETS.items() if k != missing}
        out = compose_config(file, env=env)
        assert out.returncode != 0 and missing in out.stderr, f"{file} renders without {missing}"
    for name, svc in raw_compose(file)["services"].items():
        for key, value in (svc.get("environment") or {}).items():
            if any(s in key for s in ("PASSWORD", "TOKEN")) and not key.endswith("_FILE"):
                assert str(value).startswith("${"), f"{file}: services.{name}.{key} holds a literal secret"


def _volume(spec: str) -> tuple[str, str]:
    source, target = spec.split(":")[:2]
    return source, target


def _container(file: str, name: str, svc: dict) -> Container:
    mounts = dict(reversed(_volume(v)) for v in svc.get("volumes", []))
    assert CONFIG_PATH in mounts, f"{file}: services.{name} does not mount a config file at {CONFIG_PATH}"
    health = svc.get("healthcheck", {})
    ports = {int(p) for p in svc.get("expose", [])} | {int(p["target"]) if isinstance(p, dict) else
                                                       int(str(p).rsplit(":", 1)[-1]) for p in svc.get("ports", [])}
    health_ports = []
    test = health.get("test", [])
    if test and test[0] == "CMD" and test[1:4] == ["python", "-m", "populora.healthcheck"]:
        from populora.healthcheck import build_parser

        address = build_parser().parse_args(test[4:]).address
        assert address and address.startswith("127.0.0.1:"), f"{file}: {name} health check must ask 127.0.0.1"
        health_ports.append(int(address.rsplit(":", 1)[1]))
    entrypoint = svc.get("entrypoint") or []  # set only where the image's (tini) is replaced
    return Container(f"{file}: services.{name}", name, [str(a) for a in [*entrypoint, *svc["command"]]],
                     {k: str(v) for k, v in (svc.get("environment") or {}).items()},
                     Path(mounts[CONFIG_PATH]), ports, health_ports)


def test_every_service_matches_cli_and_config(compose):
    file, doc = compose
    services = doc["services"]
    assert set(POPULORA) | {"postgres", "redis"} <= set(services), f"{file}: services missing"
    for name in POPULORA:
        cfg = check_container(_container(file, name, services[name]))
        if name in ("inference", "trainer", "evolver", "coordinator"):
            mounts = dict(reversed(_volume(v)) for v in services[name]["volumes"])
            assert mounts.get("/data") == "data", f"{file}: {name} must mount the shared volume `data` at /data"
        if name == "league":
            published = {int(p["target"]) for p in services[name].get("ports", [])}
            assert cfg.services.league.rest_port in published, f"{file}: the league's REST port is not published"
        if name in ("inference", "trainer") and cfg.model.name.startswith("/"):
            mounts = dict(reversed(_volume(v)) for v in services[name]["volumes"])
            assert any(cfg.model.name.startswith(t + "/") for t in mounts), \
                f"{file}: {name} loads {cfg.model.name}, which no volume provides"


def test_health_checks_and_dependencies(compose):
    file, doc = compose
    services = doc["services"]
    for name, svc in services.items():
        test = svc.get("healthcheck", {}).get("test", ["NONE"])
        if name not in ("coordinator", "db-setup"):  # a run and a one-off setup: they exit when done
            assert test != ["NONE"], f"{file}: {name} has no health check"
        for dep, cond in (svc.get("depends_on") or {}).items():
            if dep == "db-setup":  # the database roles: made once, then the container exits
                assert cond["condition"] == "service_completed_successfully", f"{file}: {name} waits for db-setup"
                continue
            assert cond["condition"] == "service_healthy", f"{file}: {name} should wait for {dep} to be healthy"
            assert services[dep].get("healthcheck", {}).get("test", ["NONE"]) != ["NONE"], \
                f"{file}: {name} waits for {dep} to be healthy, but {dep} has no health check"
    assert set(services["coordinator"]["depends_on"]) >= set(SERVICES) | {"postgres", "redis"}


def test_sandbox_isolation(compose):
    file, doc = compose
    sandbox = doc["services"]["sandbox"]
    assert sandbox.get("runtime") == "runsc", f"{file}: the sandbox must run under gVisor (runtime: runsc)"
    assert sandbox.get("read_only") is True, f"{file}: the sandbox's root filesystem must be read-only"
    tmpfs = {t.split(":")[0]: dict(o.split("=", 1) if "=" in o else (o, "") for o in t.split(":", 1)[1].split(","))
             for t in sandbox.get("tmpfs", [])}
    for path in ("/tmp", "/dev/shm"):
        # a job (its own unprivileged uid) may write only in the directory the zygote (root) gives it
        assert tmpfs.get(path, {}).get("mode") == "755", f"{file}: the sandbox needs tmpfs {path} with mode=755"
    assert "ALL" in sandbox.get("cap_drop", []), f"{file}: the sandbox must drop every capability"
    assert sorted(sandbox.get("cap_add", [])) == sorted(CONTAINER_CAPABILITIES), \
        f"{file}: the sandbox gets exactly the capabilities its zygote needs"
    assert sandbox.get("user") == "0:0", f"{file}: the zygote hands each job its own uid, so it runs as root"
    assert sandbox["environment"].get("POPULORA__SANDBOX__ISOLATION") == "gvisor", \
        f"{file}: inside gVisor the sandbox runs its in-gVisor profile (sandbox.isolation=gvisor)"
    assert sandbox.get("entrypoint") == ["populora"], \
        f"{file}: the sandbox service must be pid 1, the process that blanks its environment (no tini)"
    others = {n for n, s in doc["services"].items() if s.get("cap_add") or str(s.get("user", "")).startswith("0")}
    assert others <= {"sandbox"}, f"{file}: {sorted(others - {'sandbox'})} should not run as root or add capabilities"
    assert not sandbox.get("ports"), f"{file}: the sandbox must not publish ports"
    networks = doc["networks"]
    for net in sandbox["networks"]:
        assert networks[net].get("internal") is True, f"{file}: sandbox network {net} must be internal"
        members = {n for n, s in doc["services"].items() if net in (s.get("networks") or {})}
        assert members <= SANDBOX_PEERS, f"{file}: {sorted(members - SANDBOX_PEERS)} can reach the sandbox"
    assert {"coordinator", "league"} <= {n for n, s in doc["services"].items()
                                         if set(s.get("networks") or {}) & set(sandbox["networks"])}


def test_sandbox_secrets_are_files_not_environment(compose):
    """Under gVisor a job can read any process's /proc/<pid>/environ: the sandbox's database URL comes as a Compose
    secret (a file), its environment holds none; the other services keep theirs in the environment."""
    file, doc = compose
    sandbox = doc["services"]["sandbox"]
    env = {k: str(v) for k, v in sandbox["environment"].items()}
    assert not [k for k in env if re.search(r"PASSWORD|TOKEN|DB_URL", k) and not k.endswith("_FILE")], \
        f"{file}: a secret in the sandbox's environment"
    assert not [v for v in env.values() if "dummy" in v], f"{file}: a secret value in the sandbox's environment"
    mounted = {f"/run/secrets/{s.get('target', s['source']) if isinstance(s, dict) else s}" for s in sandbox["secrets"]}
    assert env["POPULORA__SANDBOX__DB_URL_FILE"] in mounted
    for name in sandbox["secrets"]:
        source = name["source"] if isinstance(name, dict) else name
        assert "file" in doc["secrets"][source], f"{file}: secret {source} must come from a file"


def _gpu_devices(svc: dict) -> list[dict]:
    return svc.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])


def test_gpu_reservations():
    gpu = rendered_compose("docker-compose.yml")["services"]
    for name in ("inference", "trainer"):
        devices = _gpu_devices(gpu[name])
        assert any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices), \
            f"docker-compose.yml: {name} reserves no NVIDIA GPU"
    cpu = rendered_compose("docker-compose.cpu.yml")["services"]
    assert not any(_gpu_devices(s) for s in cpu.values()), "docker-compose.cpu.yml must not reserve GPUs"


def test_images_and_backends():
    """GPU file: cuda image with the vLLM backend; CPU file: cpu image with the `tiny` model and `hf` backend."""
    from populora.config import load_config
    from tests.deploy.deployment import only_env

    for file, variant, backend, model in (("docker-compose.yml", "cuda", "vllm", None),
                                          ("docker-compose.cpu.yml", "cpu", "hf", "tiny")):
        inference = rendered_compose(file)["services"]["inference"]
        assert inference["image"].endswith(f"-{variant}") and inference["build"]["args"]["VARIANT"] == variant
        mounts = dict(reversed(_volume(v)) for v in inference["volumes"])
        with only_env({k: str(v) for k, v in inference["environment"].items()}):
            cfg = load_config(path=mounts[CONFIG_PATH])
        assert cfg.generation.backend == backend, f"{file}: inference backend is {cfg.generation.backend}"
        if model:
            assert cfg.model.name == model and cfg.model.device == "cpu"


def test_compose_files_define_the_same_system():
    gpu, cpu = (rendered_compose(f) for f in COMPOSE_FILES)
    assert set(gpu["services"]) == set(cpu["services"])
    assert set(gpu["volumes"]) == set(cpu["volumes"]) and set(gpu["networks"]) == set(cpu["networks"])
    for name in gpu["services"]:
        g, c = gpu["services"][name], cpu["services"][name]
        assert set(g.get("expose", [])) == set(c.get("expose", [])), f"{name}: exposed ports differ"
        assert g.get("command") == c.get("command"), f"{name}: commands differ"
        assert set(g.get("networks") or {}) == set(c.get("networks") or {}), f"{name}: networks differ"


WEIGHTS = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".ckpt", ".onnx", ".h5", ".npz")
SECRET_NAMES = (".env", "id_rsa", "id_ed25519")
SECRET_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".crt")
# where the deployment's secrets and weights live on the host (docs/operations.md): never committed, never sent to
# a build, and mounted into a container only as Compose secrets (read-only files) or the read-only models volume
SECRET_PATHS = (".env", "secrets/sandbox_db_url", "secrets/redis-users.acl", "certs/ca.pem",
                "certs/league-key.pem")
# Postgres' and Redis' TLS entrypoints and Postgres' pg_hba.conf: files of this checkout, no secret in them
DATA_STORE_FILES = ("./deploy/compose/postgres-tls.sh", "./deploy/compose/pg_hba.conf", "./deploy/compose/redis-tls.sh")
WEIGHT_PATHS = ("models/qwen/model.safetensors", "models/smol.gguf", "deploy/wheels/adapter_model.safetensors",
                "populora/adapter.bin")


# the published benchmark files (CRUXEval, EvalPlus, the math sets): read from the user's own copy
# ($POPULORA_BENCHMARKS or --data, docs/eval.md), never part of the source or an image
BENCHMARK_FILE = re.compile(r"(cruxeval|mbppplus|humanevalplus|gsm8k|math500|svamp)[^/]*\.(jsonl|json|gz)$", re.I)


def test_no_model_weights_or_secrets_in_the_build_context_the_repository_or_the_compose_files():
    """The build context (this checkout minus .dockerignore) holds no weights, no large file and no secret; the
    places an operator puts secrets and weights are ignored by git and by the build; the compose files take every
    secret from the environment or a secret file and mount models read-only, never into the image."""
    found = []
    for path in build_context():
        rel = str(path.relative_to(ROOT))
        if path.suffix in WEIGHTS or path.name in SECRET_NAMES or path.suffix in SECRET_SUFFIXES:
            found.append(f"{rel}: a weights or secrets file")
        elif BENCHMARK_FILE.search(rel):
            found.append(f"{rel}: a published benchmark file (read from POPULORA_BENCHMARKS or --data)")
        elif path.stat().st_size > 2_000_000 and not (rel.startswith("deploy/wheels/torch-") and rel.endswith(".whl")):
            found.append(f"{rel}: {path.stat().st_size} bytes, too large for source")
        elif path.stat().st_size < 2_000_000 and b"PRIVATE KEY-----" in path.read_bytes():
            found.append(f"{rel}: holds a private key")
    assert not found, "the image build would send:\n" + "\n".join(found)
    for rel in (*SECRET_PATHS, *WEIGHT_PATHS):
        assert ignored(rel), f".dockerignore must exclude {rel}"
    git = subprocess.run(["git", "check-ignore", "--no-index", "--verbose", "--non-matching",
                          *SECRET_PATHS, *WEIGHT_PATHS[:3]], cwd=ROOT, capture_output=True, text=True, timeout=30)
    unignored = [line.split("\t")[-1] for line in git.stdout.splitlines() if line.startswith("::")]
    assert git.returncode == 0 and not unignored, f".gitignore must ignore {unignored} {git.stderr}"
    for file in COMPOSE_FILES:
        for name, svc in raw_compose(file)["services"].items():
            for spec in svc.get("volumes", []):
                source, target = _volume(spec)[0], _volume(spec)[1]
                if source.startswith((".", "/")) and target != CONFIG_PATH:
                    assert (target == "/models" or source in DATA_STORE_FILES) and spec.endswith(":ro"), \
                        f"{file}: {name} mounts {spec}; only the models directory and the data stores' TLS " \
                        "scripts, read-only, come from the host"
            for value in (svc.get("environment") or {}).values():
                assert not re.search(r"dummy|BEGIN .*PRIVATE", str(value)), f"{file}: {name} holds a literal secret"


def test_placed_services_scale():
    """`--scale trainer=N --scale inference=N` works: no fixed container name or published port on either, and the
    config the coordinator reads resolves each name to every replica."""
    from populora.config import load_config
    from tests.deploy.deployment import only_env

    for file in COMPOSE_FILES:
        services = rendered_compose(file)["services"]
        coordinator = services["coordinator"]
        mounts = dict(reversed(_volume(v)) for v in coordinator["volumes"])
        with only_env({k: str(v) for k, v in coordinator["environment"].items()}):
            cfg = load_config(path=mounts[CONFIG_PATH])
        for name in ("trainer", "inference"):
            assert "container_name" not in services[name] and not services[name].get("ports"), \
                f"{file}: {name} pins a container name or a host port, so it cannot be scaled"
            assert getattr(cfg.services, name).resolve, f"{file}: services.{name}.resolve is off"
