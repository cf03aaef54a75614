"""Distributed mode on one machine: the five services as processes on loopback, Postgres and Redis, phase workers,
and a coordinator (`make run-distributed`; the distributed end-to-end test uses the same LocalCluster)."""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from populora.config import load_config
from populora.ports import free_port
from populora.rpc import SERVICE_NAMES, wait_ready
from populora.tls import tls_files

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/populora"


def ensure_database(url: str) -> None:
    """Create the Postgres database of `url` if it does not exist (the server must be up)."""
    import sqlalchemy as sa

    base, _, name = url.split("?")[0].rpartition("/")
    engine = sa.create_engine(f"{base}/postgres", isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as c:
            exists = c.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first()
            if not exists:
                c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()


class LocalCluster:
    """Services as subprocesses of `populora serve`, all reading one config file on free loopback ports; `trainers`
    and `inference` replicas of those two (each on its own port, listed in services.<name>.replicas, each adapter
    placed on one of them), one process each of the others. A process is named after its service, a replica
    `trainer-0`, `trainer-1`, ... when there are several. With `tls`, every process speaks mutual TLS with its own
    certificate (a development CA in the workdir), so each is held to its identity's scope. With `front`, the config
    gives callers `front(process name, gRPC port)` as each process's port instead of the one it listens on (a proxy
    there, as bench.faults puts one, forwards to it)."""

    def __init__(self, workdir: Path, preset: str = "cpu-tiny", overrides: list[str] | None = None,
                 db_url: str = DEFAULT_PG, redis_url: str = "redis://127.0.0.1:6379/0", trainers: int = 1,
                 inference: int = 1, tls: bool = False, front: Callable[[str, int], int] | None = None):
        self.workdir = Path(workdir).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        tls_overrides = []
        if tls:  # mutual TLS between every process: a development CA and a certificate per identity in the workdir
            from populora.certs import write_certs

            write_certs(self.workdir / "certs", days=2)
            tls_overrides = ["services.tls.enabled=true", f"services.tls.dir={self.workdir / 'certs'}"]
        counts = {"trainer": trainers, "inference": inference}
        if min(counts.values()) < 1:
            raise ValueError(f"each placed service needs at least one replica, got {counts}")
        ports = []
        self.replicas: dict[str, tuple[str, int, int]] = {}  # process name -> (service, gRPC port, metrics port)
        for name in SERVICE_NAMES:
            n = counts.get(name, 1)
            for i in range(n):
                self.replicas[name if n == 1 else f"{name}-{i}"] = (name, free_port(), free_port())
            first = next(v for k, v in self.replicas.items() if v[0] == name)
            called = {k: front(k, v[1]) if front else v[1] for k, v in self.replicas.items() if v[0] == name}
            ports += [f"services.{name}.host=127.0.0.1", f"services.{name}.port={next(iter(called.values()))}"]
            if name in ("league", "sandbox"):
                ports.append(f"services.{name}.rest_port={free_port()}")
            else:
                ports.append(f"services.{name}.metrics_port={first[2]}")
            if n > 1:
                listed = ",".join(f"127.0.0.1:{p}" for p in called.values())
                ports.append(f"services.{name}.replicas=[{listed}]")
        cfg = load_config(preset=preset, env=False, overrides=[
            f"run.output_dir={self.workdir / 'runs'}", f"store.root={self.workdir / 'store'}",
            "run.deployment=distributed", "queue.backend=redis", f"queue.redis_url={redis_url}",
            f"league.db_url={db_url}", *ports, *tls_overrides, *(overrides or [])])
        self.cfg = cfg
        self.config_path = self.workdir / "config.yaml"
        self.config_path.write_text(cfg.to_yaml())
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs = self.workdir / "logs"
        self.logs.mkdir(exist_ok=True)
        self.token = secrets.token_urlsafe(24)  # every service and worker of this cluster gets it from the environment

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "POPULORA_LOG_JSON": "1",
                    "PYTHONUNBUFFERED": "1", "POPULORA_TOKEN": self.token})
        env.pop("POPULORA_CONFIG", None)
        return env

    def address(self, name: str) -> str:
        """The gRPC address of process `name` (a service, or one replica: `trainer-1`)."""
        return f"127.0.0.1:{self.replicas[name][1]}"

    def start_service(self, name: str) -> None:
        service, port, metrics_port = self.replicas[name]
        log = open(self.logs / f"{name}.log", "ab")
        extra = ["--metrics-port", str(metrics_port)] if service not in ("league", "sandbox") else []
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "coordinator.cli", "serve", service, "--config", str(self.config_path),
             "--bind", "127.0.0.1", "--port", str(port), *extra], stdout=log, stderr=subprocess.STDOUT,
            env=self.env(), start_new_session=True)

    def start(self, timeout: float = 300.0) -> None:
        if self.cfg.league.db_url.startswith("postgresql"):
            ensure_database(self.cfg.league.db_url)
        for name in self.replicas:
            self.start_service(name)
        for name in self.replicas:
            self.wait(name, timeout)

    def wait(self, name: str, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            proc = self.procs[name]
            if proc.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text()[-3000:]
                raise RuntimeError(f"service {name} exited with {proc.returncode}:\n{tail}")
            try:
                wait_ready(self.address(name), timeout=min(5.0, max(0.5, deadline - time.monotonic())),
                           tls=tls_files(self.cfg.services.tls), server_name=self.replicas[name][0])
                return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise

    def start_worker(self, run_id: str, name: str = "worker") -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "coordinator.run.worker", "--run-id", run_id, "--db-url",
                                 self.cfg.league_db_url, "--name", name], stdout=log, stderr=subprocess.STDOUT,
                                env=self.env(), start_new_session=True)
        self.procs[name] = proc
        return proc

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(30)

    def stop(self) -> None:
        for proc in list(self.procs.values()):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    def train_command(self, run_id: str, steps: int, *extra: str) -> list[str]:
        return [sys.executable, "-m", "coordinator.cli", "train", "--config", str(self.config_path), "--mode",
                "distributed", "--run-id", run_id, "--steps", str(steps), *extra]


def _count(least: int, even: bool = False):
    """An argparse type: a whole number of at least `least` (and even, where asked)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
        if value < least or (even and value % 2):
            raise argparse.ArgumentTypeError(f"{value}: need {'an even number' if even else 'a number'} of at "
                                             f"least {least}")
        return value
    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (and $TRAINERS, $INFERENCE, $POPULATION); a population becomes its two overrides."""
    p = argparse.ArgumentParser(prog="python -m coordinator.distributed", description=__doc__)
    p.add_argument("--preset", default="cpu-smol",
                   help="the run's preset (default cpu-smol, `make run`'s: SmolLM2-135M after its warm start; "
                        "cpu-tiny, the random tiny model, checks the plumbing quickly)")
    p.add_argument("--steps", type=_count(1), default=None,
                   help="training steps (default: through the first evolution, the preset's evolution.every_k, "
                        "and at least 3)")
    p.add_argument("--workdir", default="runs/distributed")
    p.add_argument("--db-url", default=DEFAULT_PG)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    # a string default goes through `type` too, so $TRAINERS=abc or $POPULATION=3 is refused like the flag
    p.add_argument("--trainers", type=_count(1), default=os.environ.get("TRAINERS", "1"),
                   help="trainer replicas, each holding its share of the adapters ($TRAINERS, default 1)")
    p.add_argument("--inference", type=_count(1), default=os.environ.get("INFERENCE", "1"),
                   help="inference replicas, each serving its share of the adapters ($INFERENCE, default 1)")
    p.add_argument("--population", type=_count(2, even=True), default=os.environ.get("POPULATION") or None,
                   help="members, half teachers and half students ($POPULATION; default: the preset's)")
    p.add_argument("--tls", action="store_true",
                   help="mutual TLS between every process, with a development CA and certificates in the workdir")
    args = p.parse_args(argv)
    if args.population:
        half = args.population // 2
        args.overrides = [f"population.n_teachers={half}", f"population.n_students={half}", *args.overrides]
    return args


def run_steps(args: argparse.Namespace, cfg) -> int:
    """The steps to train: --steps, else through the run's first evolution (every `evolution.every_k` steps), at
    least 3 (cpu-smol: 3, evolving at step 3; cpu-tiny: 3, evolving at step 2)."""
    return args.steps or max(3, cfg.evolution.every_k)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cluster = LocalCluster(Path(args.workdir), args.preset, args.overrides, db_url=args.db_url,
                           trainers=args.trainers, inference=args.inference, tls=args.tls)
    print(f"starting {', '.join(cluster.replicas)} on loopback (logs in {cluster.logs})", flush=True)
    try:
        cluster.start()
        print("services ready: " + ", ".join(f"{n}@{cluster.address(n)}" for n in cluster.replicas), flush=True)
        run_id = f"dist-{time.strftime('%Y%m%d-%H%M%S')}"
        rc = subprocess.call(cluster.train_command(run_id, run_steps(args, cluster.cfg)), env=cluster.env())
        summary = {"run_id": run_id, "exit_code": rc, "config": str(cluster.config_path)}
        report = Path(cluster.cfg.run.output_dir) / run_id / "report.html"
        if report.exists():  # written by the coordinator at the end of the run, as `populora train` writes it
            summary["report"] = str(report)
        print(yaml.safe_dump(summary, sort_keys=False), flush=True)
        return rc
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
