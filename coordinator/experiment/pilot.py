"""`python -m coordinator.experiment.pilot`: what an experiment's design needs measured before it runs (power before
numbers): a step's cost in each arm and an answer's cost in the scoring, on this machine, with the load it had.

It trains both arms of one seed for a few steps (`--steps`; the runs continue when rerun, as `populora train --resume`
does), then scores the warm start, the population's students and the baseline at their last step on the first
`--problems` problems of each `--benchmark` in one batch, then the likelihood of their reference answers under the
same versions in one Score batch (populora.evals.likelihood), and writes <out>/pilot.json: per arm the mean seconds,
charged FLOPs and phase seconds of a step; per benchmark the seconds, tokens and FLOPs of an answer and each version's
pass rate, and of a likelihood row (one problem under one version) and each version's mean and per-problem values,
with each problem's difference population mean minus baseline; the machine's cores and its load average through the
pilot. `python -m coordinator.experiment.design` turns it into designs and their power.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from statistics import mean

from coordinator.experiment.checkpointeval import WARM, label, population_at
from coordinator.experiment.evalfiles import write_json
from coordinator.experiment.plan import Experiment, plan
from coordinator.experiment.problemsets import likelihood_scored
from populora.analysis.flops import FORWARD_FLOPS_PER_PARAM


class LoadWatch:
    """The 1-minute load average, sampled every `every` seconds in a thread while the pilot runs."""

    def __init__(self, every: float = 15.0):
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)

    def _run(self, every: float) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(every)

    def __enter__(self) -> LoadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        s = self.samples or [os.getloadavg()[0]]
        return {"mean": round(mean(s), 2), "min": round(min(s), 2), "max": round(max(s), 2), "samples": len(s)}


def step_costs(rows: list[dict]) -> dict:
    """Mean seconds, charged FLOPs (spec 14) and phase seconds of the training steps (>= 1) of one arm's rows."""
    steps = [r for r in rows if r["step"] > 0]
    if not steps:
        return {"steps": 0}
    charged = [r.get("compute_cumulative", {}).get("budget_flops", 0) for r in rows]
    flops = [b - a for a, b in zip(charged, charged[1:])]
    seconds = [r.get("step_seconds", 0.0) for r in steps]
    phases = sorted({p for r in steps for p in r.get("seconds", {})})
    return {"steps": len(steps), "seconds_per_step": mean(seconds), "flops_per_step": mean(flops),
            "flops_per_second": sum(flops) / sum(seconds) if sum(seconds) else None,
            "phase_seconds": {p: mean(r.get("seconds", {}).get(p, 0.0) for r in steps) for p in phases},
            "per_step": [{"step": r["step"], "seconds": s, "flops": f} for r, s, f in zip(steps, seconds, flops)]}


def train(exp: Experiment) -> None:
    """Both arms to their step cap, continuing runs that exist."""
    from coordinator.experiment.runner import run_arm
    from coordinator.run.journal import JournalDB

    db = JournalDB(exp.cfg.league_db_url)
    try:
        for arm in exp.arms:
            run_arm(db, arm)
    finally:
        db.close()


def score(exp: Experiment, benchmarks: list[str], problems: int) -> dict:
    """The warm start, the population's students and the baseline at their last step, on the first `problems` of
    each benchmark, in one batch per benchmark: seconds, tokens and FLOPs an answer, and each version's pass rate."""
    from coordinator.experiment.armeval import arm_rows
    from coordinator.experiment.evaluate import expected_cache, open_eval_services
    from coordinator.experiment.seedeval import load_benchmark
    from coordinator.run.modelsize import model_size
    from populora.evals import EvalTarget, evaluate
    from populora.evals.progress import progress_text
    from populora.store import ArtifactStore

    cfg = exp.arms[0].cfg
    store = ArtifactStore(cfg.store_root)
    targets, arm_of = [], {}
    warm = store.latest(f"{exp.arms[0].run_id}.warm")
    targets.append(EvalTarget(WARM, warm.adapter_id, warm.version, str(store.path_of(warm))))
    for arm in exp.arms:
        rows = arm_rows(arm)
        for adapter_id, version in (population_at(rows, rows[-1]["step"], "students") or {}).items():
            ref = store.ref(adapter_id, version)
            targets.append(EvalTarget(label(adapter_id, version), adapter_id, version, str(store.path_of(ref))))
            arm_of[targets[-1].label] = arm.name
    n = model_size(cfg).with_adapter
    out = {}
    services = open_eval_services(cfg, league=False)
    try:
        for b in benchmarks:
            chunk = load_benchmark(exp, b)[:problems]
            seen: dict = {}

            def progress(event: str, info: dict, name: str = b, got: dict = seen) -> None:
                if line := progress_text(event, info):
                    print(f"pilot {name}: {line}", file=sys.stderr, flush=True)
                else:
                    got[event] = info

            start = time.perf_counter()
            results = evaluate(services, targets, b, temperature=cfg.eval.temperature,
                               max_new_tokens=cfg.eval.max_new_tokens, chat=cfg.model.chat_template,
                               code_f_inputs=cfg.tasks.code_f_inputs, timeout_s=cfg.eval.timeout_s, problems=chunk,
                               cache=expected_cache(cfg), progress=progress)
            seconds = time.perf_counter() - start
            answers = sum(r.n_problems * r.samples for r in results)
            tokens = seen.get("generated", {}).get("tokens", 0)
            out[b] = {"problems": len(chunk), "versions": len(targets), "answers": answers, "seconds": seconds,
                      "seconds_per_answer": seconds / answers if answers else None,
                      "generation_seconds": seen.get("generated", {}).get("seconds"),
                      "tokens_per_answer": tokens / answers if answers else None,
                      "flops_per_answer": FORWARD_FLOPS_PER_PARAM * n * tokens / answers if answers else None,
                      "pass_rate": {r.label: r.pass_at_1 for r in results}}
            if likelihood_scored(b):
                out[b]["likelihood"] = likelihood_cost(services, targets, b, chunk, n, arm_of)
    finally:
        services.close()
    return out


def likelihood_cost(services, targets: list, benchmark: str, problems: list, n_params: int,
                    arm_of: dict[str, str] | None = None) -> dict:
    """The likelihood of the problems' reference answers (populora.evals.likelihood) under the same versions, in
    one batch: seconds, tokens and FLOPs a row (one problem under one version), each version's mean and per-problem
    values, and (with `arm_of`, a version's arm) each problem's difference population mean minus baseline, whose
    spread `python -m coordinator.experiment.design` takes as the likelihood's problem spread."""
    from populora.evals.likelihood import likelihood

    start = time.perf_counter()
    results = likelihood(services, targets, benchmark, problems)
    seconds = time.perf_counter() - start
    rows = sum(len(r.problems) for r in results)
    tokens = sum(p["tokens"] + p["prompt_tokens"] for r in results for p in r.problems)
    return {"rows": rows, "seconds": seconds, "seconds_per_row": seconds / rows if rows else None,
            "tokens_per_row": tokens / rows if rows else None,
            "flops_per_row": FORWARD_FLOPS_PER_PARAM * n_params * tokens / rows if rows else None,
            "mean": {r.label: r.mean for r in results},
            "per_problem": {r.label: {p["id"]: p["value"] for p in r.problems} for r in results},
            "differences": problem_differences(results, arm_of or {})}


def problem_differences(results: list, arm_of: dict[str, str]) -> list[float]:
    """Per problem answered by every version of both arms: the population's mean value minus the baseline's."""
    values = {r.label: {p["id"]: p["value"] for p in r.problems} for r in results}
    pop = [v for k, v in values.items() if arm_of.get(k) == "population"]
    base = [v for k, v in values.items() if arm_of.get(k) == "baseline"]
    if not pop or not base:
        return []
    ids = [i for i in next(iter(pop)) if all(i in v for v in pop + base)]
    return [mean(v[i] for v in pop) - mean(v[i] for v in base) for i in ids]


def main(argv: list[str] | None = None) -> int:
    """Run the pilot (module docstring) and print pilot.json."""
    from populora.config import load_config
    from populora.logs import setup_logging

    p = argparse.ArgumentParser(prog="python -m coordinator.experiment.pilot", description=main.__doc__)
    p.add_argument("--preset", default="cpu-smol-experiment-4t4s")
    p.add_argument("--config", dest="config_file", default=None)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    p.add_argument("--steps", type=int, default=2, help="training steps of each arm (default 2)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--problems", type=int, default=8, help="problems of each benchmark to score (default 8)")
    p.add_argument("--benchmark", action="append", default=[], help="default: cruxeval-o and cruxeval-i")
    p.add_argument("--out", type=Path, default=Path("runs/pilot"), help="where the runs and pilot.json go")
    args = p.parse_args(argv)
    setup_logging()
    cfg = load_config(preset=None if args.config_file else args.preset, path=args.config_file, overrides=args.overrides)
    cfg.run.output_dir, cfg.run.steps = str(args.out), args.steps
    cfg.run.budget_flops = cfg.run.budget_flops or 10**18  # the step cap ends the pilot's arms, not a budget
    exp = plan(cfg, "pilot", [args.seed], [])
    benchmarks = args.benchmark or ["cruxeval-o", "cruxeval-i"]
    from coordinator.experiment.armeval import arm_rows

    with LoadWatch() as training_load:
        start = time.perf_counter()
        train(exp)
        training_seconds = time.perf_counter() - start
    with LoadWatch() as scoring_load:
        scoring = score(exp, benchmarks, args.problems)
    result = {"preset": args.preset, "overrides": args.overrides, "cores": os.cpu_count(),
              "training": {"seconds": training_seconds, "load": training_load.summary(),
                           "arms": {a.name: step_costs(arm_rows(a)) for a in exp.arms}},
              "scoring": {"load": scoring_load.summary(), "benchmarks": scoring}}
    write_json(args.out / "pilot.json", result)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
