"""Wall time of one full training step: population (4T+4S) vs the AZR baseline (one adapter in both roles) at the same
per-adapter batch, in one process, through the real embedded coordinator. Prints one JSON object.

    python -m bench.step --json [--model smollm2-135m] [--tokens 48] [--proposals 1]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path


def run_once(mode: str, model: str, tokens: int, proposals: int, workdir: Path, steps: int) -> dict:
    from coordinator.journal import JournalDB
    from coordinator.train import run_training
    from populora.config import load_config

    n = 4 if mode == "population" else 1
    overrides = [
        f"model.name={model}", f"run.mode={mode}", f"run.output_dir={workdir / mode}",
        f"store.root={workdir / mode / 'store'}", f"league.db_url=sqlite:///{workdir / mode / 'league.sqlite'}",
        f"population.n_teachers={n}", f"population.n_students={n}", f"tasks.proposals_per_teacher={proposals}",
        "tasks.seed_buffer_size=1", "tasks.seed_max_rounds=1", f"generation.max_new_tokens={tokens}",
        "evolution.every_k=1000", "lora.rank=32", "lora.alpha=64",
    ]
    if mode == "baseline":
        overrides.append("rewards.teacher_reward=learnability")
    cfg = load_config(preset="cpu-smol", overrides=overrides, env=False)
    run_id = f"bench-{mode}"
    cfg.run.run_id = run_id
    cfg.run.steps = steps
    db = JournalDB(cfg.league_db_url)
    db.create_run(run_id, cfg.run.mode, cfg.to_yaml())
    run_dir = run_training(cfg, run_id, db)
    rows = {r["step"]: r for r in (json.loads(line) for line in (run_dir / "metrics.jsonl").read_text()
                                   .splitlines())}
    measured = [rows[s] for s in range(1, steps + 1)]
    phases = {}
    for r in measured:
        for p, s in r["seconds"].items():
            phases[p] = phases.get(p, 0.0) + s / len(measured)
    return {"step_s": sum(r["step_seconds"] for r in measured) / len(measured), "phase_s": phases,
            "generated_tokens": {k: sum(r["tokens"][k] for r in measured) / len(measured) for k in ("propose",
                                                                                                  "solve")},
            "valid_rate": [r.get("valid_rate") for r in measured]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print only the JSON object")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--tokens", type=int, default=48, help="max new tokens per completion")
    p.add_argument("--proposals", type=int, default=1, help="proposals per teacher per task type")
    p.add_argument("--steps", type=int, default=1, help="measured steps (after the seeding step)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="populora-bench-step-") as tmp:
        t0 = time.perf_counter()
        pop = run_once("population", args.model, args.tokens, args.proposals, Path(tmp), args.steps)
        base = run_once("baseline", args.model, args.tokens, args.proposals, Path(tmp), args.steps)
        total = time.perf_counter() - t0
    ratio = pop["step_s"] / base["step_s"]
    out = {
        "model": args.model, "max_new_tokens": args.tokens, "proposals_per_teacher": args.proposals,
        "population_step_s": round(pop["step_s"], 3), "baseline_step_s": round(base["step_s"], 3),
        "wall_ratio": round(ratio, 3), "adapter_steps_per_s_gain": round(8 / ratio, 3),
        "population_phase_s": {k: round(v, 3) for k, v in pop["phase_s"].items()},
        "baseline_phase_s": {k: round(v, 3) for k, v in base["phase_s"].items()},
        "population_generated_tokens": pop["generated_tokens"], "baseline_generated_tokens": base["generated_tokens"],
        "population_valid_rate": pop["valid_rate"], "baseline_valid_rate": base["valid_rate"],
        "bench_seconds": round(total, 1),
    }
    print(json.dumps(out, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
