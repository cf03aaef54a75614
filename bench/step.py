"""One training step of the population (4T+4S) against one of the AZR baseline (one adapter in both roles), at the same
per-adapter batch, in one process, through the real embedded coordinator, on a workload whose proposals are valid:
SmolLM2-135M after the warm start (spec 13; both arms start from the same cached adapter). Prints one JSON object.

    python -m bench.step --json [--model smollm2-135m] [--proposals 2] [--steps 1] [--set section.field=value]
                                [--preset cpu-smol]

Keys: population_step_s and baseline_step_s (mean wall seconds of a measured step), wall_ratio (their ratio),
valid_rate (valid proposals / proposals over both arms' measured steps), adapters_updated_population and
adapters_updated_baseline (adapters whose update had a non-zero gradient, counted from the trainer's results, per
step), adapter_updates_per_s_gain = (adapters_updated_population / population_step_s) / (adapters_updated_baseline /
baseline_step_s) (null when the baseline updated nothing), and population_phase_s / baseline_phase_s (mean seconds
of each phase). Every figure is counted from the two runs; the seeding step (step 0, warm start included) is run but
not measured.

Against the machine's peak (coordinator/record/efficiency.py, measured in this process at the run's start and merged
with the best this machine has reached): step_mfu (the population step's useful executed FLOPs,
populora/analysis/work.py, per second over the peak of the cores it used; baseline_step_mfu the same), and per phase
of each arm its mfu and roofline_fraction (population_phase_fractions, baseline_phase_fractions), with the peaks they
were measured against (peaks). Progress lines go to stderr.

    python -m bench.step --json --before REV [--rounds 1] [--set ...] [--after-set ...]

runs instead the same seeded `cpu-smol` step (its own 2 teachers and 2 students) with the code of commit REV and with
this tree, alternating, each in a fresh process, and reports step_speedup_vs_before (REV's step seconds over this
tree's), both sides' step and phase seconds, same_outputs and this tree's step_mfu (bench/step_before.py).
--after-set overrides apply to this tree's side only (settings REV does not have).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import emit, load_average, progress


def run_once(mode: str, model: str, proposals: int, workdir: Path, steps: int, extra: list[str],
             preset: str = "cpu-smol") -> dict:
    """Run seeding + `steps` steps of one arm of `preset`; the measured steps' metrics as the run wrote them."""
    from coordinator.run.journal import Journal, JournalDB
    from coordinator.train import run_training
    from populora.config import load_config

    n = 4 if mode == "population" else 1
    out = workdir / mode
    overrides = [
        f"model.name={model}", f"run.mode={mode}", f"run.output_dir={out}", f"store.root={out / 'store'}",
        f"league.db_url=sqlite:///{out / 'league.sqlite'}", f"population.n_teachers={n}",
        f"population.n_students={n}", f"tasks.proposals_per_teacher={proposals}", "tasks.seed_buffer_size=2",
        "tasks.seed_max_rounds=1", "evolution.every_k=1000", "warmstart.enabled=true",
    ]
    if mode == "baseline":
        overrides.append("rewards.teacher_reward=learnability")
    cfg = load_config(preset=preset, overrides=overrides + extra, env=False)
    run_id = f"bench-{mode}"
    cfg.run.run_id = run_id
    cfg.run.steps = steps
    db = JournalDB(cfg.league_db_url)
    db.create_run(run_id, cfg.run.mode, cfg.to_yaml())
    run_dir = run_training(cfg, run_id, db)
    rows = {r["step"]: r for r in (json.loads(line) for line in (run_dir / "metrics.jsonl").read_text()
                                   .splitlines())}
    measured = [rows[s] for s in range(1, steps + 1)]
    warmed = Journal(db, run_id).get(0, "warmstart")
    db.close()
    return summarize(measured, {"cached": warmed.cached if warmed and warmed.adapter_id else None})


def summarize(measured: list[dict], warm: dict) -> dict:
    """Per-step means of a run's measured metrics rows: wall time, phases, updated adapters, proposals."""
    k = len(measured)
    phases: dict[str, float] = {}
    for r in measured:
        for p, s in r["seconds"].items():
            phases[p] = phases.get(p, 0.0) + s / k
    updated = [sum(1 for s in r["updates"].values() if s["grad_norm"] > 0) for r in measured]
    proposals = sum(sum(m["proposals"] for m in r["task_types"].values()) for r in measured)
    valid = sum(round((r["valid_rate"] or 0.0) * sum(m["proposals"] for m in r["task_types"].values()))
                for r in measured)
    return {"step_s": sum(r["step_seconds"] for r in measured) / k, "phase_s": phases,
            "updated": sum(updated) / k, "updates": sum(len(r["updates"]) for r in measured) / k,
            "proposals": proposals, "valid": valid,
            "generated_tokens": {t: sum(r["tokens"][t] for r in measured) / k for t in ("propose", "solve")},
            "warm_start_cached": warm.get("cached"), **fractions(measured)}


def fractions(measured: list[dict]) -> dict:
    """Mean step mfu and per phase mfu and roofline_fraction over the measured steps' `efficiency` (none when the
    run measured none), and the peaks of the last."""
    eff = [r["efficiency"] for r in measured if r.get("efficiency")]
    if not eff:
        return {}

    def mean(xs) -> float | None:
        xs = [x for x in xs if x is not None]
        return round(sum(xs) / len(xs), 4) if xs else None

    phases = {p: {key: mean(e["phases"][p][key] for e in eff if p in e["phases"]) for key in ("mfu", "roofline_fraction")}
              for p in eff[-1]["phases"]}
    return {"step_mfu": mean(e["step"]["mfu"] for e in eff), "phase_fractions": phases, "peaks": eff[-1]["peaks"],
            "dtype": eff[-1]["dtype"]}


def gain(updated_pop: float, pop_s: float, updated_base: float, base_s: float) -> float | None:
    """(adapters updated per second, population) / (the same, baseline); None when the baseline updated none."""
    if updated_base <= 0 or pop_s <= 0 or base_s <= 0:
        return None
    return (updated_pop / pop_s) / (updated_base / base_s)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print only the JSON object")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--proposals", type=int, default=2,
                   help="proposals per teacher per task type (>= 2, else a teacher's groups hold one rollout each "
                        "and its advantages are all 0)")
    p.add_argument("--steps", type=int, default=1, help="measured steps (after the seeding step)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="a config override applied to both arms (e.g. trainer.batch_mode=batched)")
    p.add_argument("--before", metavar="REV", help="compare the cpu-smol step with the code of commit REV instead")
    p.add_argument("--rounds", type=int, default=1, help="--before: rounds of both sides, alternating (default 1)")
    p.add_argument("--after-set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="--before: a config override for this tree's side only")
    p.add_argument("--preset", default="cpu-smol", help="the preset both arms (--before: both sides) run")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.before:
        from bench.step_before import compare

        if args.rounds < 1:
            p.error("--rounds must be >= 1")
        emit(compare(args, args.after_set), indent=None if args.json else 2, digits=4)
        return 0
    load_start = load_average()
    with tempfile.TemporaryDirectory(prefix="populora-bench-step-") as tmp:
        t0 = time.perf_counter()
        progress("bench.step", "arm", f"population: seeding, then {args.steps} measured step(s)")
        pop = run_once("population", args.model, args.proposals, Path(tmp), args.steps, args.set, args.preset)
        progress("bench.step", "population_step_s", round(pop["step_s"], 2))
        progress("bench.step", "arm", f"baseline: seeding, then {args.steps} measured step(s)")
        base = run_once("baseline", args.model, args.proposals, Path(tmp), args.steps, args.set, args.preset)
        progress("bench.step", "baseline_step_s", round(base["step_s"], 2))
        total = time.perf_counter() - t0
    g = gain(pop["updated"], pop["step_s"], base["updated"], base["step_s"])
    proposals = pop["proposals"] + base["proposals"]
    out = {
        "model": args.model, "preset": args.preset, "proposals_per_teacher": args.proposals, "measured_steps": args.steps,
        "overrides": args.set,
        "population_step_s": round(pop["step_s"], 3), "baseline_step_s": round(base["step_s"], 3),
        "wall_ratio": round(pop["step_s"] / base["step_s"], 3),
        "valid_rate": round((pop["valid"] + base["valid"]) / proposals, 3) if proposals else None,
        "adapters_updated_population": pop["updated"], "adapters_updated_baseline": base["updated"],
        "adapter_updates_per_s_gain": round(g, 3) if g is not None else None,
        "population_phase_s": {k: round(v, 3) for k, v in pop["phase_s"].items()},
        "baseline_phase_s": {k: round(v, 3) for k, v in base["phase_s"].items()},
        "population_valid_rate": round(pop["valid"] / pop["proposals"], 3) if pop["proposals"] else None,
        "baseline_valid_rate": round(base["valid"] / base["proposals"], 3) if base["proposals"] else None,
        "population_adapters": pop["updates"], "baseline_adapters": base["updates"],
        "population_generated_tokens": pop["generated_tokens"], "baseline_generated_tokens": base["generated_tokens"],
        "warm_start_cached": [pop["warm_start_cached"], base["warm_start_cached"]],
        "step_mfu": pop.get("step_mfu"), "baseline_step_mfu": base.get("step_mfu"),
        "population_phase_fractions": pop.get("phase_fractions"), "baseline_phase_fractions": base.get("phase_fractions"),
        "peaks": pop.get("peaks"), "dtype": pop.get("dtype"),
        "bench_seconds": round(total, 1), "load_average_1m_start": load_start, "load_average_1m_end": load_average(),
    }
    emit(out, indent=None if args.json else 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
