"""`make test-compose`: the CPU Compose stack for real on this machine, checked from the host, then taken down.

Builds (or reuses) the images (scripts/images.sh, which also starts dockerd when it is not running and we are
root), brings up docker-compose.cpu.yml's services and waits for every health check, runs the cpu-tiny training
run of deploy/compose/cpu-distributed.yaml in the coordinator container, then checks from the host: the league's
REST leaderboard lists the run's adapters, each of them loads in PEFT from the shared volume, every service's
/metrics answers, and every program of the hostile corpus (tests/sandbox/hostile) run through the containerised
sandbox (under gVisor) is contained, and that every port it reaches refuses plaintext (gRPC, HTTPS, Postgres,
Redis) while answering over TLS (scripts/compose_tls_checks.py). The stack runs with TLS everywhere: mutual TLS
between the services with a certificate per identity, Postgres and Redis over TLS, Redis' ACL users, all made here
for the run in a temporary directory. Always ends with `down -v` and checks that no container, network or volume of
the stack is left. Prints one JSON line; exits 1 when anything failed (the errors on stderr and in the line).

Environment: what scripts/images.sh reads (LOCAL_BASE, CA_BUNDLE, TORCH_WHEEL, ...), and
COMPOSE_TEST_TIMEOUT_S (default 900: the wait for health checks and the run, each), COMPOSE_TEST_TRAINERS
(default 2: trainer replicas, `up --scale trainer=N`, each holding its share of the adapters).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import compose_tls_checks as tlscheck  # noqa: E402

COMPOSE_FILE = "docker-compose.cpu.yml"
CONFIG_FILE = ROOT / "deploy" / "compose" / "cpu-distributed.yaml"
PROJECT = "populora-composetest"
HEALTHCHECKED = ("postgres", "redis", "inference", "trainer", "league", "sandbox", "evolver")
LOG_DIR = ROOT / "build" / "test-compose"
TIMEOUT_S = float(os.environ.get("COMPOSE_TEST_TIMEOUT_S", "900"))
# replicas of the placed services (`up --scale`): the run's adapters are split between the trainers
SCALE = {"trainer": int(os.environ.get("COMPOSE_TEST_TRAINERS", "2"))}


class SetupError(RuntimeError):
    """The machine cannot run the test; the message says what to do."""


def log(msg: str) -> None:
    print(f"[test-compose] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], env: dict[str, str] | None = None, timeout: float | None = None, check: bool = True,
        **kw: Any) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout, text=True, capture_output=True, **kw)
    if check and out.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({out.returncode}): {(out.stderr or out.stdout)[-2000:]}")
    return out


def compose_command() -> list[str]:
    """`docker compose` (v2) when the plugin is there, else `docker-compose` (v1, Debian's package)."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise SetupError("neither `docker compose` nor `docker-compose` is installed: apt-get install docker-compose")


def build_images(env: dict[str, str]) -> dict[str, str]:
    """scripts/images.sh (its progress goes to our stderr); the image variables it wrote for docker-compose."""
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "images.sh")], cwd=ROOT, env=env)
    if proc.returncode != 0:
        raise SetupError("building the images failed (see above)")
    lines = (ROOT / "build" / "compose-images.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def require_gvisor_runtime() -> None:
    runtimes = run(["docker", "info", "--format", "{{json .Runtimes}}"]).stdout
    if '"runsc"' not in runtimes:
        daemon = (ROOT / "deploy" / "docker" / "daemon.json").read_text()
        raise SetupError("the Docker daemon has no runtime `runsc` (gVisor), which the sandbox service runs under: "
                         "install runsc (apt-get install runsc), register it in /etc/docker/daemon.json as in "
                         f"deploy/docker/daemon.json and restart dockerd:\n{daemon}")


class Stack:
    """One Compose project of docker-compose.cpu.yml with its own secrets, league port and images."""

    def __init__(self, images: dict[str, str]):
        from populora.ports import free_port

        self.compose = compose_command()
        self.league_port = free_port()
        self.password = password = secrets.token_urlsafe(24)  # Postgres' superuser: postgres and db-setup only
        self.db_passwords = {role: secrets.token_urlsafe(24) for role in ("league", "reader", "sandbox", "coordinator")}
        self.redis_password = secrets.token_urlsafe(24)
        # the sandbox's database URL as a file only root can read (the compose files' `secrets:`), removed in down()
        self.secrets_dir = Path(tempfile.mkdtemp(prefix="populora-compose-secrets-"))
        path = self.secrets_dir / "sandbox_db_url"
        path.write_text(f"postgresql+psycopg://populora_sandbox:{self.db_passwords['sandbox']}@postgres:5432/populora"
                        "?sslmode=verify-full&sslrootcert=/run/secrets/tls/ca.pem")
        path.chmod(0o400)
        tlscheck.write_redis_acl(self.secrets_dir / "redis-users.acl", self.redis_password)
        # a CA and a certificate per identity and data store, for this run only
        self.certs = tlscheck.make_certs(self.secrets_dir / "certs")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("POPULORA", "COMPOSE_"))}
        env.update(images)
        env.update({"COMPOSE_PROJECT_NAME": PROJECT, "POSTGRES_PASSWORD": password,
                    "LEAGUE_DB_PASSWORD": self.db_passwords["league"], "READER_DB_PASSWORD": self.db_passwords["reader"],
                    "COORDINATOR_DB_PASSWORD": self.db_passwords["coordinator"],
                    "POPULORA_LEAGUE_PORT": str(self.league_port), "POPULORA_SECRETS_DIR": str(self.secrets_dir),
                    "POPULORA_CERTS_DIR": str(self.certs), "REDIS_PASSWORD": self.redis_password})
        self.env = env

    def __call__(self, *args: str, timeout: float | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return run([*self.compose, "-f", COMPOSE_FILE, *args], env=self.env, timeout=timeout, check=check)

    def containers(self, service: str) -> list[str]:
        ids = self("ps", "-q", service).stdout.split()
        if not ids:
            raise RuntimeError(f"service {service} has no container")
        return ids

    def container(self, service: str) -> str:
        return self.containers(service)[0]

    def state(self, service: str) -> tuple[str, int, str]:
        """(status, restarts, health) of the service's containers: ("running", 0, "healthy"), ("exited", 0, "")...;
        of a scaled service, the first container that is not running and healthy (else the first), and healthy
        only once it has all its replicas."""
        fmt = "{{.State.Status}} {{.RestartCount}} {{if .State.Health}}{{.State.Health.Status}}{{end}}"
        states = []
        for cid in self.containers(service):
            out = run(["docker", "inspect", "--format", fmt, cid]).stdout.split()
            states.append((out[0], int(out[1]), out[2] if len(out) > 2 else ""))
        worst = next((st for st in states if st[0] != "running" or st[2] != "healthy"), states[0])
        if len(states) < SCALE.get(service, 1) and worst[2] == "healthy":
            return worst[0], worst[1], "starting"
        return worst

    def address(self, service: str) -> str:
        """The container's address on one of its networks (the host reaches the stack's bridges directly)."""
        nets = json.loads(run(["docker", "inspect", "--format", "{{json .NetworkSettings.Networks}}",
                               self.container(service)]).stdout)
        ips = [n["IPAddress"] for n in nets.values() if n.get("IPAddress")]
        if not ips:
            raise RuntimeError(f"service {service} has no IP address")
        return ips[0]

    def logs(self, service: str, tail: int = 40) -> str:
        return self("logs", "--no-color", "--tail", str(tail), service, check=False).stdout

    def leftovers(self) -> dict[str, list[str]]:
        label = f"label=com.docker.compose.project={PROJECT}"
        return {kind: run(cmd + ["--filter", label]).stdout.split() for kind, cmd in (
            ("containers", ["docker", "ps", "-aq"]), ("networks", ["docker", "network", "ls", "-q"]),
            ("volumes", ["docker", "volume", "ls", "-q"]))}

    def down(self, last: bool = False) -> None:
        self("down", "-v", "--remove-orphans", "--timeout", "20", timeout=300, check=False)
        if last:
            shutil.rmtree(self.secrets_dir, ignore_errors=True)


def wait_healthy(stack: Stack, result: dict[str, Any]) -> None:
    """Wait until every health-checked service is healthy (result["services_healthy"] counts them as they come);
    a container that exits, or that Docker restarted (`restart: unless-stopped`), fails at once."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        states = {s: stack.state(s) for s in HEALTHCHECKED}
        healthy = [s for s, (_, _, h) in states.items() if h == "healthy"]
        result["services_healthy"] = len(healthy)
        dead = [s for s, (st, restarts, _) in states.items() if st in ("exited", "dead", "restarting") or restarts]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited (or was restarted) before becoming healthy:\n" +
                               "\n".join(stack.logs(s) for s in dead))
        if len(healthy) == len(HEALTHCHECKED):
            return
        if time.monotonic() > deadline:
            waiting = [s for s in HEALTHCHECKED if s not in healthy]
            raise RuntimeError(f"not healthy after {TIMEOUT_S:.0f} s: {waiting}:\n" +
                               "\n".join(stack.logs(s) for s in waiting))
        time.sleep(3)


def leaderboard(stack: Stack, run_id: str) -> list[str]:
    url = f"https://127.0.0.1:{stack.league_port}/v1/runs/{run_id}/leaderboard"
    resp = tlscheck.https_get(url, stack.certs, "league")
    resp.raise_for_status()
    return [row["adapter_id"] for row in resp.json()["rows"]]


def check_volume(stack: Stack, image: str, run_id: str, model: str, adapters: list[str]) -> dict:
    """scripts/compose_volume_check.py in a one-off container of the project image on the data volume."""
    volume = f"{PROJECT}_data"
    script = (ROOT / "scripts" / "compose_volume_check.py").read_text()
    out = run(["docker", "run", "--rm", "-i", "--network", "none", "-v", f"{volume}:/data:ro", image,
               "python", "-", run_id, model, *adapters], input=script, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def metrics_endpoints(stack: Stack, services: dict[str, Any]) -> dict[str, str]:
    """Each service's /metrics URL (HTTPS) as the host reaches it: the league through its published port, the others
    on their container's address."""
    urls = {"league": f"https://127.0.0.1:{stack.league_port}/metrics"}
    for name in ("inference", "trainer", "sandbox", "evolver"):
        port = services[name].get("rest_port") if name == "sandbox" else services[name].get("metrics_port")
        urls[name] = f"https://{stack.address(name)}:{port}/metrics"
    return urls


def metrics_answer(stack: Stack, name: str, url: str) -> str:
    """'' when the URL serves Prometheus text over TLS (the certificate of service `name`) to a reader (the dashboard's
    certificate: /metrics is each service's Read), else what was wrong."""
    try:
        resp = tlscheck.https_get(url, stack.certs, name, timeout=15, identity="dashboard")
    except httpx.HTTPError as e:
        return f"{url}: {type(e).__name__}: {e}"
    if resp.status_code != 200 or "# TYPE" not in resp.text:
        return f"{url}: HTTP {resp.status_code}, not Prometheus text"
    return ""


def sandbox_runner(address: str, certs: Path):
    """A Runner (list[Job] -> list[JobResult]) that sends the jobs to the sandbox service's Execute over gRPC (mutual
    TLS as the coordinator)."""
    from populora import rpc
    from populora.pb import sandbox_pb2
    from populora.tasks.jobs import Job, JobResult
    from populora.tls import TlsFiles

    tls = TlsFiles("coordinator", certs / "ca.pem", certs / "coordinator.pem", certs / "coordinator-key.pem")
    remote = rpc.connect("sandbox", address, timeout=900, tls=tls)

    def run_jobs(jobs: list[Job]) -> list[JobResult]:
        request = sandbox_pb2.ExecuteRequest(jobs=[
            sandbox_pb2.ExecJob(job_id=j.job_id, program=j.program, call=j.calls[0] if j.calls else "",
                                timeout_s=j.timeout_s, memory_mb=j.memory_mb) for j in jobs])
        return [JobResult(r.job_id, r.status, reprs=[r.value_repr] if r.value_repr else [], stdout=r.stdout,
                          error=r.error, seconds=r.seconds) for r in remote.Execute(request).results]

    return run_jobs


# What the deployment itself must keep from a job: the sandbox's secret files (its database URL, its TLS key), and the
# secrets in any process's environment or command line (gVisor lets any uid read /proc/<pid>/environ).
SECRET_PROBES = {
    "read_secret_file": "print(open('/run/secrets/sandbox_db_url').read())",
    "read_tls_key": "print(open('/run/secrets/tls/sandbox-key.pem').read())",
    "scan_proc_environ_cmdline": ("import os\nfor p in os.listdir('/proc'):\n    for f in ('environ', 'cmdline'):\n"
                                  "        try:\n            print(open(f'/proc/{p}/{f}').read())\n"
                                  "        except Exception:\n            pass"),
}


def hostile(stack: Stack) -> tuple[int, list[str]]:
    """The hostile corpus through the containerised sandbox (the expectations of a service's own container: its
    zygotes chroot into the runtime root), then the deployment's own secrets out of a job's reach, then normal
    jobs still work."""
    from populora.tasks.jobs import Job
    from tests.sandbox.hostile_corpus import run_corpus

    runner = sandbox_runner(f"{stack.address('sandbox')}:50054", stack.certs)
    total, wrong = run_corpus(runner, profile="container")
    for r in runner([Job(name, program, timeout_s=5.0) for name, program in SECRET_PROBES.items()]):
        total += 1
        if (any(p in r.stdout for p in (stack.password, *stack.db_passwords.values())) or "PRIVATE KEY" in r.stdout
                or (r.job_id.startswith("read_") and r.status != "error")):
            wrong.append(f"{r.job_id}: a job read a secret of the deployment (status {r.status})")
    normal = runner([Job(f"n{i}", "def f(a, b):\n    return sorted([a, b, a * b])", calls=[f"f({i}, 3)"])
                     for i in range(20)])
    bad = [r for i, r in enumerate(normal) if r.status != "ok" or r.reprs != [repr(sorted([i, 3, 3 * i]))]]
    if bad:
        wrong.append(f"after the corpus, {len(bad)} of 20 normal jobs failed: {bad[0].status} {bad[0].error[:120]}")
    return total, wrong


def main() -> int:
    result: dict[str, Any] = {"compose_up_s": None, "run_s": None, "services_healthy": 0, "steps_done": 0,
                              "services": len(HEALTHCHECKED)}
    errors: list[str] = []
    cfg = yaml.safe_load(CONFIG_FILE.read_text())
    run_id, steps = cfg["run"]["run_id"], int(cfg["run"]["steps"])
    result["steps_asked"] = steps
    result["tls"] = bool((cfg["services"].get("tls") or {}).get("enabled"))
    stack: Stack | None = None
    try:
        t0 = time.monotonic()
        images = build_images(dict(os.environ))
        result["images_s"] = round(time.monotonic() - t0, 1)
        require_gvisor_runtime()
        stack = Stack(images)
        project_image = f"{images['POPULORA_IMAGE']}:{images['POPULORA_TAG']}-cpu"
        stack.down()  # what an interrupted earlier run of this test left
        log(f"docker-compose up ({PROJECT}): {', '.join(HEALTHCHECKED)}")
        t0 = time.monotonic()
        scale = [a for name, n in SCALE.items() for a in ("--scale", f"{name}={n}")]
        stack("up", "-d", "--no-build", *scale, *HEALTHCHECKED, timeout=TIMEOUT_S)
        wait_healthy(stack, result)
        result["compose_up_s"] = round(time.monotonic() - t0, 1)
        log(f"all {result['services_healthy']} services healthy after {result['compose_up_s']} s; "
            f"training run {run_id} ({steps} steps) in the coordinator container")

        t0 = time.monotonic()
        coordinator = stack("run", "--rm", "-T", "coordinator", timeout=TIMEOUT_S, check=False)
        result["run_s"] = round(time.monotonic() - t0, 1)
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        (LOG_DIR / "coordinator.log").write_text(coordinator.stdout + coordinator.stderr)
        if coordinator.returncode != 0:
            errors.append(f"the coordinator exited {coordinator.returncode}: "
                          f"{(coordinator.stderr or coordinator.stdout)[-1500:]}")
        log(f"run finished in {result['run_s']} s (exit {coordinator.returncode}); checking from the host")

        trainers = stack.containers("trainer")
        logs = [run(["docker", "logs", cid], check=False) for cid in trainers]
        result["trainers_updating"] = sum("updated " in out.stdout + out.stderr for out in logs)
        if result["trainers_updating"] < min(2, len(trainers)):
            errors.append(f"only {result['trainers_updating']} of {len(trainers)} trainer replicas updated an "
                          "adapter: the population was not split between them")
        adapters = leaderboard(stack, run_id)
        result["adapters_listed"] = len(adapters)
        volume = check_volume(stack, project_image, run_id, cfg["model"]["name"], adapters)
        unlisted = sorted(set(volume["population"]) - set(adapters))
        if not volume["population"] or unlisted:
            errors.append(f"the league's leaderboard of {run_id} ({len(adapters)} adapters) misses the run's "
                          f"population {unlisted or '(none recorded)'}")
        result["steps_done"] = volume["steps_done"]
        if volume["steps_done"] != steps:
            errors.append(f"{volume['steps_done']} steps recorded in metrics.jsonl, {steps} asked")
        not_peft = {a: v["error"] for a, v in volume["adapters"].items() if not v["peft"]}
        result["adapters_peft"] = len(adapters) - len(not_peft)
        errors += [f"adapter {a} is not a PEFT adapter in the volume: {e}" for a, e in not_peft.items()]

        urls = metrics_endpoints(stack, cfg["services"])
        bad_metrics = [m for m in (metrics_answer(stack, n, u) for n, u in urls.items()) if m]
        result["metrics_ok"] = len(urls) - len(bad_metrics)
        errors += [f"/metrics does not answer: {m}" for m in bad_metrics]

        log("hostile corpus through the containerised sandbox")
        total, wrong = hostile(stack)
        result["hostile_total"], result["hostile_contained"] = total, total - len(wrong)
        errors += [f"hostile program not contained: {w}" for w in wrong]

        log("plaintext to every port the host reaches (refused), and TLS (answered)")
        seen = tlscheck.plaintext_refused(stack.address, stack.league_port, cfg["services"], stack.certs,
                                          stack.password, stack.redis_password)
        errors += seen.pop("problems")
        result.update(seen)
    except SetupError as e:
        errors.append(str(e))
    except Exception as e:  # whatever went wrong is reported in the line; the stack still comes down
        errors.append(f"{type(e).__name__}: {e}")
        traceback.print_exc()
    finally:
        if stack is not None:
            if errors:
                LOG_DIR.mkdir(parents=True, exist_ok=True)
                (LOG_DIR / "services.log").write_text(stack("logs", "--no-color", check=False).stdout)
                log(f"service logs in {LOG_DIR / 'services.log'}")
            log("docker-compose down -v")
            stack.down(last=True)
            left = {k: v for k, v in stack.leftovers().items() if v}
            result["left_after_down"] = sum(len(v) for v in left.values())
            if left:
                errors.append(f"left after `down -v`: {left}")
    if errors:
        result["errors"] = errors
        for e in errors:
            print(f"error: {e}", file=sys.stderr)
    print(json.dumps(result))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
