"""What bench.scale's measurements share: the population it places, the config of its replicas, replicas as pinned
`populora serve` processes and the coordinator's placed client over them, the step's generation batches, and the
weights comparison."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from bench.harness import random_adapters

ROLES = ("teacher", "student")
TOKEN = secrets.token_urlsafe(24)  # the replicas' and the bench's, for this run only


def population(n: int) -> list[str]:
    """`n` adapter ids as a run names them: half teachers, half students."""
    return [f"bench.{'T' if i % 2 == 0 else 'S'}{i // 2}" for i in range(n)]


class Replicas:
    """`n` replicas of one service as pinned processes, and the coordinator's object over them."""

    def __init__(self, service: str, n: int, cfg_path: Path, logs: Path):
        from populora.ports import free_port

        self.service, self.ports = service, [free_port() for _ in range(n)]
        self.procs = []
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "POPULORA_LOG_JSON": "1",
               "POPULORA_TOKEN": TOKEN}
        available = sorted(os.sched_getaffinity(0))
        for i, port in enumerate(self.ports):
            log = open(logs / f"{service}-{n}-{i}.log", "ab")
            proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "serve", service, "--config",
                                     str(cfg_path), "--port", str(port), "--metrics-port", "0"],
                                    stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            os.sched_setaffinity(proc.pid, {available[i % len(available)]})
            self.procs.append(proc)

    def connect(self, cfg):
        """The coordinator's object over these replicas (PlacedTrainer or PlacedInference), once each answers."""
        from coordinator.clients.replicas import PlacedInference, PlacedTrainer
        from coordinator.clients.replicas import Replicas as Placed
        from populora.rpc import wait_ready
        from populora.tls import tls_files

        for port in self.ports:
            wait_ready(f"127.0.0.1:{port}", timeout=600, tls=tls_files(cfg.services.tls), server_name=self.service)
        # placement hashes the replicas' names: named by their index, any two groups of n split a population alike
        addresses = [(f"{self.service}-{i}", f"127.0.0.1:{p}") for i, p in enumerate(self.ports)]
        wrap = PlacedTrainer if self.service == "trainer" else PlacedInference
        return wrap(Placed(self.service, cfg, addresses=lambda: addresses))

    def rss_mb(self) -> list[float]:
        import psutil

        return [round(psutil.Process(p.pid).memory_info().rss / 2**20, 1) for p in self.procs]

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def config(args, workdir: Path, store: Path, tls: bool = False):
    """cpu-smol at the bench's shapes (its token budgets capped at args.new_tokens when given); with `tls`, mutual
    TLS between the bench (the coordinator's identity) and the replicas, with the certificates `populora certs`
    wrote in workdir/certs."""
    from populora.config import load_config

    secure = ["services.tls.enabled=true", f"services.tls.dir={workdir / 'certs'}"] if tls else []
    cfg = load_config(preset="cpu-smol", env=False, overrides=[
        f"model.name={args.model}", f"store.root={store}", f"run.output_dir={workdir / 'runs'}",
        f"lora.rank={args.rank}", f"lora.alpha={2 * args.rank}", "trainer.threads=1", "generation.threads=1",
        f"generation.max_resident_adapters={max(32, args.adapters)}", "lora.dropout=0",
        f"services.token={TOKEN}", *secure])
    cap = getattr(args, "new_tokens", 0)
    if cap:  # both token budgets at most `cap` (a quick run)
        g = cfg.generation
        g.max_new_tokens, g.teacher_max_new_tokens = min(g.max_new_tokens, cap), min(g.teacher_max_new_tokens, cap)
    return cfg


def start_adapter(cfg, store_root: Path):
    """One nonzero LoRA in the store that every member starts from (init_from), as the warm start gives."""
    from populora.models import load_from_config
    from populora.store import ArtifactStore

    base = load_from_config(cfg)
    (ref,) = random_adapters(ArtifactStore(store_root), base.model, list(cfg.lora.target_modules), cfg.lora.rank, 1,
                             "bench.start", base_model=cfg.model.name)
    return ref, base.tokenizer.vocab_size


def as_role(rollout, role: str):
    from populora.pb import trainer_pb2

    out = trainer_pb2.Rollout()
    out.CopyFrom(rollout)
    out.role = role
    return out


def phase_requests(args, workdir: Path, store_name: str = "store-t1") -> list[list]:
    """One step's propose and solve batches at cpu-smol shapes, built by the phases' own code
    (bench.inference_workload): the population's teachers each propose `tasks.proposals_per_teacher` tasks of every
    type (chat prompts with the buffer's references, the teachers' token limit), a seeded share of them valid, and
    the students matched with uneven weights solve those with `tasks.n_samples` samples each; every request on the
    adapter version the one-trainer run left."""
    from bench.inference_workload import Shape, make_workload, open_run, seed_tasks
    from bench.inference_workload import phase_requests as built
    from populora.store import ArtifactStore

    store = workdir / store_name  # the adapters the one-trainer run wrote
    cfg = config(args, workdir, store)
    st = ArtifactStore(store)
    ids = population(args.adapters)
    shape = Shape(tuple(i for i, a in enumerate(ids) if ".T" in a), tuple(i for i, a in enumerate(ids) if ".S" in a),
                  cfg.tasks.proposals_per_teacher)
    run, services = open_run(cfg, st, None)
    try:
        plan = make_workload(run, "scale", shape, ids, seed_tasks(run), {a: st.latest(a).version for a in ids})
        return built(run, plan)
    finally:
        services.close()


def short(batch: list, tokens: int) -> list:
    from populora.pb import inference_pb2

    out = []
    for r in batch:
        copy = inference_pb2.GenerationRequest()
        copy.CopyFrom(r)
        copy.sampling.max_new_tokens = tokens
        out.append(copy)
    return out


def same_weights(a: dict, b: dict, tol: float = 1e-5) -> bool:
    return a.keys() == b.keys() and all(
        a[k].keys() == b[k].keys() and all(float((a[k][w] - b[k][w]).abs().max()) <= tol for w in a[k]) for k in a)
