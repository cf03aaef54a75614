"""`python -m bench.step --before REV`: the same seeded `cpu-smol` step run by the code of commit REV and by this
tree, each in a fresh process, the two alternating for --rounds rounds (so a change in the machine's load weighs on
both alike); reports step_speedup_vs_before = REV's step seconds / this tree's.

REV's code is checked out with `git worktree add` into a temporary directory outside the repository (its gRPC
modules generated there), run with that directory first on the import path, and removed afterwards. Both sides run
`populora train`'s embedded loop through `DRIVER` below, which uses only what both trees have (load_config,
JournalDB, run_training, metrics.jsonl), and print the measured steps' metrics rows. `same_outputs` says whether the
two sides generated and trained the same (the rows' token counts, validity, solve rates and losses agree): a change
meant to keep the arithmetic must keep it true.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import load_average, progress

ROOT = Path(__file__).resolve().parents[1]

# Run in a child with the tree to use first on sys.path: argv = tree, workdir, steps, overrides (JSON list), preset.
DRIVER = r"""
import json, logging, sys
tree, workdir, steps, overrides, preset = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5]
sys.path.insert(0, tree)
logging.basicConfig(level=logging.WARNING)
from coordinator.run.journal import JournalDB
from coordinator.train import run_training
from populora.config import load_config
cfg = load_config(preset=preset, overrides=[f"run.output_dir={workdir}", f"store.root={workdir}/store",
                  f"league.db_url=sqlite:///{workdir}/league.sqlite", "evolution.every_k=1000"] + overrides, env=False)
cfg.run.run_id, cfg.run.steps = "bench-before", steps
db = JournalDB(cfg.league_db_url)
db.create_run("bench-before", cfg.run.mode, cfg.to_yaml())
run_dir = run_training(cfg, "bench-before", db)
db.close()
rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
print(json.dumps([r for r in rows if r["step"] >= 1]))
"""

# what two runs that generated and trained the same agree on, compared per measured step
OUTPUT_KEYS = ("tokens", "valid_rate", "solve_rate", "outcomes")


def checkout(rev: str) -> Path:
    """REV's tree in a temporary worktree, its gRPC modules generated."""
    where = Path(tempfile.mkdtemp(prefix="populora-before-"))
    subprocess.run(["git", "worktree", "add", "--detach", str(where), rev], cwd=ROOT, check=True,
                   capture_output=True, text=True)
    subprocess.run([sys.executable, "-m", "populora.protoc"], cwd=where, check=True, capture_output=True, text=True,
                   env={**os.environ, "PYTHONPATH": str(where)})
    return where


def remove(where: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=ROOT, check=False, capture_output=True)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=False, capture_output=True)


def run_side(tree: Path, workdir: Path, steps: int, overrides: list[str], preset: str = "cpu-smol") -> list[dict]:
    """One side's measured steps' metrics rows, from a fresh process importing `tree`'s code."""
    cmd = [sys.executable, "-c", DRIVER, str(tree), str(workdir), str(steps), json.dumps(overrides), preset]
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False, timeout=7200)
    if out.returncode != 0:
        raise RuntimeError(f"the step on {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def side_figures(rows: list[dict]) -> dict:
    """Mean step seconds and phase seconds of a side's measured steps, their charged FLOPs and what they produced."""
    k = len(rows)
    phases: dict[str, float] = {}
    for r in rows:
        for p, s in r["seconds"].items():
            phases[p] = phases.get(p, 0.0) + s / k
    out = {"step_s": sum(r["step_seconds"] for r in rows) / k, "phase_s": phases,
           "flops": sum(r["compute"]["flops"] for r in rows) / k,
           "outputs": [{key: r.get(key) for key in OUTPUT_KEYS} | {"losses": sorted(
               round(u["loss"], 6) for u in r.get("updates", {}).values())} for r in rows]}
    eff = [r["efficiency"] for r in rows if r.get("efficiency")]
    if eff:
        out["efficiency"] = eff[-1]
    return out


def compare(args, extra_after: list[str]) -> dict:
    """Both sides for args.rounds rounds, alternating which goes first; the figures of each and the speed-up."""
    out: dict = {"before": args.before, "preset": args.preset, "rounds": args.rounds, "overrides": args.set, "after_overrides": extra_after,
                 "load_average_1m_start": load_average()}
    tree = checkout(args.before)
    sides: dict[str, list[dict]] = {"before": [], "after": []}
    try:
        with tempfile.TemporaryDirectory(prefix="populora-bench-before-") as tmp:
            for k in range(args.rounds):
                for name in ("before", "after") if k % 2 == 0 else ("after", "before"):
                    code = tree if name == "before" else ROOT
                    overrides = args.set + (extra_after if name == "after" else [])
                    t0 = time.perf_counter()
                    rows = run_side(code, Path(tmp) / f"{name}-{k}", args.steps, overrides, args.preset)
                    sides[name].append(side_figures(rows))
                    progress("bench.step", f"{name} round {k}", f"{sides[name][-1]['step_s']:.1f} s a step "
                                                                f"({time.perf_counter() - t0:.0f} s with seeding)")
    finally:
        remove(tree)
    for name, got in sides.items():
        out[f"{name}_step_s"] = sum(g["step_s"] for g in got) / len(got)
        out[f"{name}_step_s_rounds"] = [round(g["step_s"], 3) for g in got]
        out[f"{name}_phase_s"] = {p: round(sum(g["phase_s"].get(p, 0.0) for g in got) / len(got), 3)
                                  for p in got[0]["phase_s"]}
    out["step_speedup_vs_before"] = out["before_step_s"] / out["after_step_s"]
    out["step_speedup_rounds"] = [round(b["step_s"] / a["step_s"], 3)
                                  for b, a in zip(sides["before"], sides["after"], strict=True)]
    out["same_outputs"] = all(b["outputs"] == a["outputs"] for b, a in zip(sides["before"], sides["after"],
                                                                           strict=True))
    after = sides["after"][-1]
    if "efficiency" in after:
        eff = after["efficiency"]
        out["after_step_mfu"] = eff["step"]["mfu"]
        out["after_phase_fractions"] = {p: {"mfu": e["mfu"], "roofline_fraction": e["roofline_fraction"]}
                                        for p, e in eff["phases"].items()}
        # the same seeded step: this tree's useful work (REV's tree may not count it) over REV's seconds
        before = sides["before"][-1]
        mfu = eff["step"]["mfu"]
        out["before_step_mfu"] = mfu * eff["step"]["seconds"] / before["step_s"] if mfu is not None else None
    out["load_average_1m_end"] = load_average()
    return out

