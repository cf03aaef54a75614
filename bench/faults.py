"""A storm of faults on one distributed run: nothing lost, nothing applied twice, the one-process run's result.

    python -m bench.faults --json [--faults 30] [--seed S] [--steps 6] [--workdir DIR]

The run: the tiny preset with the fitted echo model of the end-to-end tests (tests/e2e/echo_model.py: every step has
valid proposals, sandbox jobs and updates that train), two trainer and two inference replicas, overlapped steps
(loop.max_staleness=1), a coordinator whose phases are taken by two external workers over Redis Streams, and a
Postgres and a Redis of the bench's own (tests/e2e/servers.py), which it may restart. Every gRPC call between the
processes goes through a proxy of the bench's (bench/fault_proxy.py), which can cut the connections it holds.

The schedule (`schedule`, from --seed alone, so a failing seed replays) draws --faults faults and the pauses before
them (0.5-4 s). Its kinds: SIGKILL of a service process (a trainer or inference replica, the league, the sandbox, the evolver),
of a phase worker or of the coordinator, each started again at once (the coordinator with --resume); a Postgres
restart (stopped as a crash stops it, started after 0.5-2 s) and a Redis one (SIGKILL, its append-only file kept); a
replica removed (SIGTERM) and added back 2-6 s later; the connections through one process's proxy cut in the middle
of whatever calls they carry. A fault is injected at its moment whatever the run is doing; the bench records the
step and phases in flight then. If the run ends before the schedule does, the rest is not injected (`faults` counts
what was) and the bench exits 1.

The same seeded run is made in one process (embedded, lock-step of the same seeds; its records are cached per model
and source tree, tests/e2e/records.py), and the storm's run must equal it: every phase record, the league's adapters
and lineage, and every member's weights and optimizer digests after each update and evolution (`same_as_one_process`;
the records compared without the fields that only say how a phase was delivered: served_ms, reused, duplicates).
Prints one JSON object:

- `faults` (injected), `by_kind`, `recovered` (faults after which the run went on to store another phase, or ended),
  `steps_done`, `same_as_one_process`, `differences` (the first few, when not), `lost_updates` (updates the journal
  stored whose version the store lacks), `duplicated_updates` (an adapter's version made by two updates, from the
  trainer replicas' logs), `coordinator_exits` (times the coordinator ended with an error on its own, each resumed),
  `longest_stall_s` (the longest time no phase was stored), `seconds`, `load`, `seed` and `schedule` (each fault:
  kind, target, the pause before it, when it hit, the step it hit, the phases stored by then, seconds to recover).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.harness import emit, load_averages, progress

RUN = "storm"
# overlapped steps; each request decoded in a batch of its own (generation.batch_invariant), so no placement, replica
# restart or split batch changes a row's last bits, on one thread everywhere (a thread count is another rounding):
# what is compared with the one-process run is what the faults did
OVERLAP = ("loop.max_staleness=1", "generation.batch_invariant=true", "generation.threads=1", "trainer.threads=1")
KINDS = {  # kind: weight in the draw
    "kill_replica": 5, "kill_service": 2, "kill_worker": 3, "kill_coordinator": 2, "restart_postgres": 1,
    "restart_redis": 1, "remove_replica": 2, "cut_connection": 4}
REPLICAS = ("trainer-0", "trainer-1", "inference-0", "inference-1")
SINGLE = ("league", "sandbox", "evolver")
TIMEOUT = 2400.0  # the whole run, faults included, on a loaded two-core machine


def schedule(seed: int, n: int, kinds: list[str] | None = None) -> list[dict]:
    """`n` faults drawn from `seed` alone (of `kinds`, by default every kind): kind, target, the pause before it and
    how long a removed process or a stopped server stays away."""
    rng = random.Random(seed)
    chosen = kinds or list(KINDS)
    unknown = sorted(set(chosen) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; the kinds are {', '.join(KINDS)}")
    kinds, weights = chosen, [KINDS[k] for k in chosen]
    out = []
    for _ in range(n):
        kind = rng.choices(kinds, weights)[0]
        target = {"kill_replica": lambda: rng.choice(REPLICAS), "kill_service": lambda: rng.choice(SINGLE),
                  "remove_replica": lambda: rng.choice(REPLICAS),
                  "cut_connection": lambda: rng.choice(REPLICAS + SINGLE)}.get(kind, lambda: "")()
        away = round(rng.uniform(2.0, 6.0), 2) if kind == "remove_replica" else (
            round(rng.uniform(0.5, 2.0), 2) if kind.startswith("restart") else 0.0)
        out.append({"kind": kind, "target": target, "pause_s": round(rng.uniform(0.5, 4.0), 2), "away_s": away})
    return out


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print the result as one JSON line (the default: indented)")
    p.add_argument("--faults", type=int, default=30, help="faults to inject (default 30)")
    p.add_argument("--seed", type=int, default=0, help="the schedule's seed (default 0)")
    p.add_argument("--steps", type=int, default=6, help="steps of the run (default 6)")
    p.add_argument("--trainers", type=int, default=2, help="trainer replicas (default 2)")
    p.add_argument("--inference", type=int, default=2, help="inference replicas (default 2)")
    p.add_argument("--kinds", default="", help="draw only these kinds, comma-separated (default: every kind: "
                   + ", ".join(KINDS) + ")")
    p.add_argument("--workdir", default=None, help="where the run's files and logs go (default: a temporary one); "
                   "when the run differs from the one-process run, both runs' records are written there")
    args = p.parse_args(argv)
    if args.faults < 0 or args.steps < 1 or args.trainers < 1 or args.inference < 1:
        p.error("--faults must be >= 0, --steps, --trainers and --inference >= 1")
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if set(args.kinds) - set(KINDS):
        p.error(f"unknown --kinds {sorted(set(args.kinds) - set(KINDS))}; the kinds are {', '.join(KINDS)}")
    return args


class Storm:
    """The cluster, its servers and proxies, the coordinator and workers, and the faults as they are injected."""

    def __init__(self, work: Path, model: str, steps: int, trainers: int = 2, inference: int = 2):
        from bench.fault_proxy import FaultProxy
        from coordinator.distributed import LocalCluster
        from tests.e2e.conftest import e2e_overrides
        from tests.e2e.servers import OwnPostgres, OwnRedis

        self.work, self.steps = work, steps
        self.pg, self.redis = OwnPostgres(), OwnRedis(persistent=True)
        self.proxies: dict[str, FaultProxy] = {}

        def front(name: str, port: int) -> int:
            self.proxies[name] = FaultProxy(port)
            return self.proxies[name].port

        over = [o for o in e2e_overrides(work, model) if not o.startswith("league.db_url")]
        over += ["queue.stream_prefix=storm", "queue.claim_idle_ms=2000", "sandbox.workers=1", *OVERLAP]
        self.cluster = LocalCluster(work, "cpu-tiny", over, db_url=self.pg.url, redis_url=self.redis.url,
                                    trainers=trainers, inference=inference, front=front)
        self.replicas = [n for n, (service, _, _) in self.cluster.replicas.items() if service in ("trainer", "inference")]
        self.train: subprocess.Popen | None = None
        self.workers = 0
        self.coordinator_exits = 0

    def start(self) -> None:
        self.cluster.start()
        self._coordinator()
        for _ in range(2):
            self._worker()

    def _coordinator(self) -> None:
        cmd = self.cluster.train_command(RUN, self.steps, "--workers", "0", "--no-report", "--resume")
        self.train = subprocess.Popen(cmd, env=self.cluster.env(), stdout=open(self.cluster.logs / "train.log", "ab"),
                                      stderr=subprocess.STDOUT, start_new_session=True)

    def _worker(self) -> None:
        self.cluster.start_worker(RUN, f"worker-{self.workers}")
        self.workers += 1

    def live_workers(self) -> list[str]:
        return [n for n, p in self.cluster.procs.items() if n.startswith("worker-") and p.poll() is None]

    def finished(self) -> bool:
        """Whether the coordinator ended the run; one that ended with an error is counted and resumed."""
        code = self.train.poll()
        if code is None:
            return False
        if code == 0:
            return True
        self.coordinator_exits += 1
        progress("faults", "coordinator exited on its own, resumed; its code", code)
        self._coordinator()
        return False

    def name(self, target: str) -> str:
        """The process a drawn target names in this cluster: `trainer-1` is `trainer` where it has one replica."""
        if target in self.cluster.replicas:
            return target
        service, _, index = target.rpartition("-")
        names = [n for n, v in self.cluster.replicas.items() if v[0] == service]
        return names[int(index) % len(names)]

    def inject(self, fault: dict, rng: random.Random) -> None:
        kind, c = fault["kind"], self.cluster
        target = fault["target"] = self.name(fault["target"]) if fault["target"] else ""
        if kind in ("kill_replica", "kill_service"):
            c.kill(target)
            c.start_service(target)
            c.wait(target)
        elif kind == "kill_worker":
            live = self.live_workers()
            if live:
                fault["target"] = victim = rng.choice(live)
                c.kill(victim)
            self._worker()
        elif kind == "kill_coordinator":
            os.killpg(self.train.pid, signal.SIGKILL)
            self.train.wait(30)
            self._coordinator()
        elif kind == "restart_postgres":
            self.pg.stop("immediate")
            time.sleep(fault["away_s"])
            self.pg.start()
        elif kind == "restart_redis":
            self.redis.stop()
            time.sleep(fault["away_s"])
            self.redis.start()
        elif kind == "remove_replica":
            c.kill(target, signal.SIGTERM)
            time.sleep(fault["away_s"])
            c.start_service(target)
            c.wait(target)
        elif kind == "cut_connection":
            fault["cut"] = self.proxies[target].cut()
        else:
            raise ValueError(f"unknown fault kind {kind!r}")

    def close(self) -> None:
        self.cluster.stop()
        for p in self.proxies.values():
            p.close()
        self.redis.close()
        self.pg.close()


def _stored(state) -> list[tuple[int, str, float]]:
    """(step, phase, finished_at) of every phase the journal holds; [] while Postgres is away."""
    try:
        return [(r["step"], r["phase"], r["finished_at"]) for r in state.phase_rows(RUN)]
    except Exception:  # noqa: BLE001 - Postgres restarting: nothing to read this instant
        return []


def run_storm(storm: Storm, plan: list[dict], seed: int) -> dict:
    """Start the run, inject `plan`, wait for the end; what happened."""
    from coordinator.run.journal import JournalDB

    rng = random.Random(seed + 1)  # choices made at the moment (which live worker), replayed with the seed
    storm.start()
    state = JournalDB(storm.pg.url)
    begun = time.monotonic()
    done: list[dict] = []
    for i, fault in enumerate(plan):
        time.sleep(fault["pause_s"])
        if storm.finished():
            break
        stored = _stored(state)
        hit = {**fault, "at_s": round(time.monotonic() - begun, 2), "stored": len(stored),
               "step": max((s for s, p, _ in stored if p == "account"), default=0) + 1}
        start, hit["wall"] = time.monotonic(), time.time()
        storm.inject(hit, rng)
        hit["inject_s"] = round(time.monotonic() - start, 2)
        done.append(hit)
        progress("faults", f"fault {i + 1}/{len(plan)}", f"{hit['kind']} {hit['target']} in step {hit['step']}")
    deadline = begun + TIMEOUT
    while not storm.finished():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the run did not finish in {TIMEOUT:.0f} s")
        time.sleep(0.5)
    return {"done": done, "seconds": time.monotonic() - begun, "state": state, "ended": time.time()}


def _recovery(done: list[dict], rows: list[tuple[int, str, float]], ended: float | None) -> None:
    """Each fault: recovered when a phase was stored after it, or the run ended after it (`ended`, None when it did
    not), with the seconds from its moment to that."""
    finished = sorted(f for _, _, f in rows)
    for hit in done:
        moment = hit.pop("wall")
        later = [f for f in finished if f > moment] + ([ended] if ended is not None else [])
        hit["recovered"] = bool(later)
        hit["recover_s"] = round(later[0] - moment, 2) if later else None


def check(storm: Storm, outcome: dict, want: dict) -> dict:
    """The run against the one-process run of the same seeds, and the updates against the store and the logs."""
    from populora.reproduce import differences
    from populora.store import ArtifactStore
    from tests.e2e.faults import updates_made
    from tests.e2e.records import run_records
    from tests.e2e.test_overlap import _without

    state = outcome["state"]
    got = run_records(state, storm.pg.url, RUN)
    diff = differences(_without(want), _without(got))
    if diff:  # both runs' records beside the logs, to find where they part
        for name, records in (("records.json", got), ("reference.json", want)):
            (storm.work / name).write_text(json.dumps(records, indent=1, sort_keys=True))
    store = ArtifactStore(storm.cluster.cfg.store_root)
    lost = 0
    for r in state.phase_rows(RUN):
        if r["phase"] == "update":
            update = state.get(RUN, r["step"], "update")
            lost += sum(update["population"][a]["version"] not in store.versions(a) for a in update["stats"])
    made = Counter(u for n in storm.replicas if n.startswith("trainer")
                   for u in updates_made(storm.cluster.logs / f"{n}.log"))
    rows = [(r["step"], r["phase"], r["finished_at"]) for r in state.phase_rows(RUN)]
    finished = sorted(f for _, _, f in rows)
    stalls = [b - a for a, b in zip(finished, finished[1:])]
    return {"steps_done": max((s for s, p, _ in rows if p == "account"), default=0),
            "same_as_one_process": not diff, "differences": diff[:10], "lost_updates": lost,
            "duplicated_updates": sum(k - 1 for k in made.values() if k > 1),
            "longest_stall_s": round(max(stalls, default=0.0), 2), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["OMP_NUM_THREADS"] = "1"  # this process's reference run and every process it starts: one thread
    from tests.e2e.echo_model import echo_model_dir
    from tests.e2e.records import made_here
    from tests.e2e.servers import need_binaries

    need_binaries()
    plan = schedule(args.seed, args.faults, args.kinds)
    model = str(echo_model_dir())
    progress("faults", "one-process reference", f"{args.steps} steps (cached after the first time)")
    want = made_here(model, run_id=RUN, steps=args.steps, extra=OVERLAP)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="populora-faults-"))
    storm = Storm(work, model, args.steps, args.trainers, args.inference)
    try:
        outcome = run_storm(storm, plan, args.seed)
        result = check(storm, outcome, want)
    finally:
        storm.close()
    done = outcome["done"]
    _recovery(done, result.pop("rows"), outcome["ended"])
    out = {"faults": len(done), "scheduled": len(plan), "by_kind": dict(Counter(h["kind"] for h in done)),
           "recovered": sum(h["recovered"] for h in done),
           **result, "coordinator_exits": storm.coordinator_exits, "seconds": round(outcome["seconds"], 1),
           "load": load_averages(), "seed": args.seed,
           "replicas": {"trainer": args.trainers, "inference": args.inference}, "kinds": args.kinds or list(KINDS), "steps": args.steps, "workdir": str(work), "schedule": done}
    emit(out, indent=None if args.json else 1)
    ok = (out["faults"] == len(plan) and out["same_as_one_process"] and out["lost_updates"] == 0
          and out["duplicated_updates"] == 0 and out["steps_done"] == args.steps)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
