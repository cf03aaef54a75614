"""Overlapped steps against lock-step (spec 16): the same seeded run at loop.max_staleness = 0 and = 1, in
distributed mode on loopback (Postgres, Redis, the five services as processes), inference and the trainer each
pinned to a core of its own, one after the other in one invocation. Prints one JSON object.

    python -m bench.pipeline --json [--preset cpu-smol] [--steps 6] [--set section.field=value]

Keys: steps_per_hour_k0 / _k1 (training steps per hour, from the end of step 0 to the end of the last step),
pipeline_gain (= k1 / k0), trainer_idle_fraction_k0 / _k1 and inference_idle_fraction_k0 / _k1 (the share of that
time the service ran no phase, from the journal's phase spans), staleness_max_observed_k1, update_to_served_ms
(p50 and p99 at k = 1: the trainer's answer to the new versions served), valid_rate_k1, nonzero_gradient_fraction_k1
(updates whose gradient was not zero), identical_k0 (the k = 0 run's records, clock readings left out, equal those of
a second lock-step run of the same seed for its first --check-steps steps, bit for bit; null with --check-steps 0),
first_difference (where the second run first departed: "step/phase/path: value expected, value got", in the order
the phases finished, also printed on stderr; null when none did), and the load averages after each arm (the arms
run one after the other: other jobs on the machine can slow one of them).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import emit, load_averages, progress, quantile
from populora.reproduce import first_difference, normal

SHAPES = ["population.n_teachers=2", "population.n_students=2", "warmstart.enabled=true",
          "evolution.every_k=1000"]  # cpu-smol shapes, 2T+2S, warm-started; no evolution barrier in 6 steps


# ---------------------------------------------------------------- pure parts (tests/test_bench_pipeline.py)

def arm_figures(phase_rows: list[dict], metrics: list[dict]) -> dict:
    """One run's figures from its journal rows (every step) and its metrics rows."""
    from coordinator.record.timeline import busy_seconds, spans

    every = spans(phase_rows)
    lo = max((s["end"] for s in every if s["step"] == 0), default=0.0)
    hi = max((s["end"] for s in every), default=lo)
    steps = max((s["step"] for s in every), default=0)
    idle = {}
    for service in ("trainer", "inference"):
        busy = busy_seconds([(s["start"], s["end"]) for s in every if s["service"] == service and s["step"] > 0],
                            lo, hi)
        idle[service] = 1 - busy / (hi - lo) if hi > lo else None
    trained = [m for m in metrics if m["step"] > 0]
    updates = [u for m in trained for u in m.get("updates", {}).values()]
    proposals = sum(sum(t["proposals"] for t in m["task_types"].values()) for m in trained)
    valid = sum(round((m["valid_rate"] or 0) * sum(t["proposals"] for t in m["task_types"].values()))
                for m in trained)
    served = [m["staleness"]["update_to_served_ms"] for m in trained if "staleness" in m]
    return {"steps": steps, "seconds": hi - lo, "steps_per_hour": steps * 3600 / (hi - lo) if hi > lo else None,
            "trainer_idle_fraction": idle["trainer"], "inference_idle_fraction": idle["inference"],
            "staleness_max": max((m["staleness"]["max"] for m in trained if "staleness" in m), default=0),
            "served_ms": served, "valid_rate": valid / proposals if proposals else None,
            "nonzero_gradient_fraction": (sum(u["grad_norm"] > 0 for u in updates) / len(updates)
                                          if updates else None)}


def results(k0: dict, k1: dict, identical: bool | None, difference: str | None = None) -> dict:
    """The bench's keys from the figures of the two arms (`difference`: the first record in which the second
    lock-step run departed from the first)."""
    def r(x, d=4):
        return None if x is None else round(x, d)

    gain = k1["steps_per_hour"] / k0["steps_per_hour"] if k0["steps_per_hour"] and k1["steps_per_hour"] else None
    served = k1["served_ms"]
    return {"steps_per_hour_k0": r(k0["steps_per_hour"], 2), "steps_per_hour_k1": r(k1["steps_per_hour"], 2),
            "pipeline_gain": r(gain, 3),
            "trainer_idle_fraction_k0": r(k0["trainer_idle_fraction"]),
            "trainer_idle_fraction_k1": r(k1["trainer_idle_fraction"]),
            "inference_idle_fraction_k0": r(k0["inference_idle_fraction"]),
            "inference_idle_fraction_k1": r(k1["inference_idle_fraction"]),
            "staleness_max_observed_k1": k1["staleness_max"],
            "update_to_served_ms": {"p50": r(quantile(served, 0.5), 1), "p99": r(quantile(served, 0.99), 1)}
            if served else None,
            "valid_rate_k1": r(k1["valid_rate"]), "nonzero_gradient_fraction_k1": r(k1["nonzero_gradient_fraction"]),
            "identical_k0": identical, "first_difference": difference}


# ---------------------------------------------------------------- running an arm

def pin(pid: int, core: int) -> None:
    """Every thread of process `pid` onto one core (threads started later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {core})
        except OSError:  # the thread ended meanwhile
            pass


def run_arm(workdir: Path, preset: str, k: int, steps: int, overrides: list[str], run_id: str) -> tuple[list, list]:
    """One distributed run at loop.max_staleness = k; its journal rows, its metrics rows and its records."""
    from coordinator.distributed import LocalCluster
    from coordinator.run.journal import JournalDB

    db_url = os.environ.get("POPULORA_BENCH_DB", "postgresql+psycopg://postgres@127.0.0.1:5432/populora_bench")
    run_db = f"{db_url}_{os.getpid()}_{workdir.name}"
    cluster = LocalCluster(workdir, preset, [*overrides, f"loop.max_staleness={k}"], db_url=run_db,
                           redis_url=os.environ.get("POPULORA_BENCH_REDIS", "redis://127.0.0.1:6379/0"))
    try:
        cluster.start()
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) >= 2:  # inference and the trainer each on a core of its own
            pin(cluster.procs["inference"].pid, cores[0])
            pin(cluster.procs["trainer"].pid, cores[1])
        rc = subprocess.call(cluster.train_command(run_id, steps, "--no-report"), env=cluster.env(),
                             stdout=open(cluster.logs / "train.log", "wb"), stderr=subprocess.STDOUT)
        if rc != 0:
            raise RuntimeError((cluster.logs / "train.log").read_text()[-3000:])
    finally:
        cluster.stop()
    db = JournalDB(run_db)
    rows = db.phase_rows(run_id)
    records = {f"{r['step']}/{r['phase']}": normal(db.get(run_id, r["step"], r["phase"])) for r in rows}
    db.close()
    metrics = [json.loads(x) for x in (workdir / "runs" / run_id / "metrics.jsonl").read_text().splitlines()]
    return rows, metrics, records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print only the JSON object")
    p.add_argument("--preset", default="cpu-smol")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--check-steps", type=int, default=2, help="steps of the second lock-step run (0: no check)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="a config override applied to every run")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    overrides = [*SHAPES, "run.reproducible=true", *args.set]  # identical_k0 asks that a seed repeat its run
    run_id = "bench-pipeline"  # one id for every run: the same seeds
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="populora-bench-pipeline-") as tmp:
        figures, records, loads = {}, {}, {}
        for k in (0, 1):
            progress("pipeline", "arm", f"loop.max_staleness={k}: {args.steps} steps, distributed on loopback")
            rows, metrics, records[k] = run_arm(Path(tmp) / f"k{k}", args.preset, k, args.steps, overrides, run_id)
            figures[k] = arm_figures(rows, metrics)
            loads[f"load_average_k{k}"] = load_averages()  # beside each arm: a busy machine slows one arm only
            progress("pipeline", f"steps_per_hour_k{k}", figures[k]["steps_per_hour"])
        identical = difference = None
        if args.check_steps:
            progress("pipeline", "arm", f"lock-step again for {args.check_steps} steps, compared bit for bit")
            _, _, again = run_arm(Path(tmp) / "lockstep", args.preset, 0, args.check_steps, overrides, run_id)
            first = {key: v for key, v in records[0].items() if int(key.split("/")[0]) <= args.check_steps}
            difference = first_difference(first, again)  # bit for bit: the same machine, seed and settings
            identical = difference is None
            if difference:
                print(f"pipeline: the second lock-step run departed from the first at {difference}", file=sys.stderr)
    out = {"preset": args.preset, "steps": args.steps, "overrides": overrides,
           **results(figures[0], figures[1], identical, difference),
           **loads, "bench_seconds": round(time.perf_counter() - t0, 1)}
    emit(out, indent=None if args.json else 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
