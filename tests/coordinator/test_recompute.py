"""`python -m coordinator.experiment.recompute DIR`: a result made of shards, computed again from the shard files
with numpy and the standard library alone, agrees with what shardresult wrote on every number; a number changed in a
shard file, in scores.json or in README.md is named and makes it fail; it imports nothing of the project.

The shards are five seeds' exports made by shards.export itself, from fabricated arms: metrics rows with an evolution,
pass@1 and likelihood files written by the evaluation's own result classes, a curve on the first problems at the
earlier checkpoint, a held-out template left out, the students scored."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from coordinator.experiment import shards
from coordinator.experiment.armdynamics import arm_dynamics
from coordinator.experiment.checkpointeval import WARM, checkpoints_of, label, population_at
from coordinator.experiment.evalfiles import OVERLAP_FILE, eval_path, write_json
from coordinator.experiment.plan import plan
from coordinator.experiment.recompute import t_quantile
from coordinator.experiment.shardresult import combine
from populora.analysis.tdist import t_quantile as project_t_quantile
from populora.config import load_config
from populora.evals.harness import EvalTarget, ProblemResult, score
from populora.evals.likelihood import LikelihoodResult

ROOT = Path(__file__).resolve().parents[2]
ID = "syn"
BUDGET = 10**12
SEEDS = (1, 2, 3, 4, 5)
CURVE = 10  # the earlier checkpoint's versions answer the first CURVE problems
TEMPLATES = ("gcd", "window", "reverse_rec", "sort_op")
TASKS = ("code_o", "code_i", "code_f")
HELDOUT = [f"heldout/{k}/{TASKS[k % 3]}/{TEMPLATES[(k // 3) % 4]}" for k in range(30)]
CRUX = [f"sample_{k}" for k in range(16)]
SETS = {"heldout": {"pass": HELDOUT[:20], "likelihood": HELDOUT[:25]},
        "cruxeval-o": {"pass": CRUX[:15], "likelihood": CRUX}}


def _rows(run_id: str, seed: int, population: bool) -> list[dict]:
    """An arm's metrics: population steps of about 2.4e11 FLOPs (a student mutated at step 3), baseline steps of
    about 1.15e11 (seed 5's exactly 1.25e11: on each checkpoint); a few valid programs a step."""
    step_flops = (2.4e11 if population else 1.15e11) + seed * 1e9 if population or seed != 5 else 1.25e11
    steps = 4 if population else 8
    rows = []
    for k in range(steps + 1):
        if population:
            members = {f"{run_id}.t0": "teacher", f"{run_id}.t1": "teacher", f"{run_id}.s0": "student",
                       f"{run_id}.s1" if k < 4 else f"{run_id}.s2": "student"}
            pop = {a: {"role": r, "version": (1 if a.endswith("s2") else k)} for a, r in members.items()}
        else:
            pop = {f"{run_id}.b": {"role": "both", "version": k}}
        teacher = next(iter(pop))
        row = {"step": k, "population": pop,
               "compute_cumulative": {"budget_flops": int(k * step_flops), "flops": int(k * step_flops),
                                      "tokens": 1000 * k},
               "valid_programs": [{"teacher": teacher, "program": f"def f(x):\n    return x + {j}",
                                   "ast_depth": 3 + (j + k) % 2, "cyclomatic": 1, "lines_of_code": 2}
                                  for j in range(2)] if k else [],
               "student_solve_rate": {a: 0.1 * ((k + seed) % 5) + 0.05 * a.endswith("s2") for a, m in pop.items()
                                      if m["role"] != "teacher"}}
        if population and k == 3:
            row["evolution"] = [{"child": f"{run_id}.s2", "parents": [f"{run_id}.s1"], "operator": "mutation",
                                 "relative_change": 0.05 * seed, "retired": f"{run_id}.s1", "effective_rank": 4.0}]
        rows.append(row)
    return rows


def _passed(rng: np.random.Generator, population: bool, problem: str, seed: int) -> int:
    """The population solves reverse_rec (the warm start's behaviour) and a little more elsewhere."""
    rate = 0.9 if population and "reverse_rec" in problem else 0.2 + (0.15 if population else 0.0) + 0.02 * seed
    return int(rng.random() < rate)


def _files(exp, arm, rows: dict[str, list[dict]], seed: int) -> None:
    """The arm's pass@1 and likelihood files: its scored students (the baseline's one adapter) at each checkpoint, the
    earlier ones on the curve's first problems; the population's file also holds the warm start."""
    cps = checkpoints_of(rows, BUDGET, exp.cfg.eval.checkpoints)
    scored = [population_at(rows[arm.name], cp.arms[arm.name].step, "students") or {} for cp in cps]
    targets: dict[str, int] = {}
    for cp, members in zip(cps, scored):
        for a, v in members.items():
            targets.setdefault(label(a, v), cp.arms[arm.name].step)
    final = {label(a, v) for a, v in scored[-1].items()}
    population = arm.name == "population"
    versions = [(name, name in final) for name in targets] + ([(WARM, True)] if population else [])
    rng = np.random.default_rng(100 * seed + population)
    for b in exp.scored_benchmarks:
        likelihood = b.endswith("-logprob")
        ids = SETS[b.removesuffix("-logprob")]["likelihood" if likelihood else "pass"]
        results = []
        for name, last in versions:
            adapter, _, version = name.rpartition("@v") if name != WARM else (f"{arm.run_id}.warm", "", "1")
            answered = ids if last else ids[:CURVE]
            if likelihood:
                problems = []
                for p in answered:
                    tokens = int(rng.integers(5, 30))
                    value = float(rng.normal(-2.0 + (0.1 if population and name != WARM else 0.0), 0.3))
                    problems.append({"id": p, "logprob": value * tokens, "tokens": tokens, "prompt_tokens": 150,
                                     "value": value})
                results.append(LikelihoodResult(name, adapter, int(version), b, problems, arm.run_id).to_json())
            else:
                problems = [ProblemResult(p, _passed(rng, population and name != WARM, p, seed), 1,
                                          "") for p in answered]
                target = EvalTarget(name, adapter, int(version), None)
                results.append(score(arm.run_id, target, b, problems, 1).to_json())
        body = {"benchmark": b, "limit": len(ids), "samples": 1, "targets": targets,
                "results": results, "budget": float(BUDGET), "trained": {"step": rows[arm.name][-1]["step"]}}
        if likelihood:
            body["kind"] = "logprob"
        write_json(eval_path(exp.out_dir, arm.run_id, b), body)


def _make_result(tmp: Path) -> Path:
    """Five shards exported by shards.export (no weights to digest) and the result shardresult computes from them."""
    cfg = load_config(preset="cpu-tiny", env=False, overrides=[
        f"run.output_dir={tmp / 'runs'}", "eval.checkpoints=[0.5,1.0]", "eval.members=students",
        f"eval.curve_limit={CURVE}", "eval.benchmarks=[cruxeval-o]"])
    cfg.run.budget_flops = BUDGET
    results = tmp / "results" / ID
    results.mkdir(parents=True)
    write_json(results / OVERLAP_FILE, {"shared": {"reverse_rec": ["string_op"], "gcd": []}})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shards, "final_digests", lambda exp: {})
        for seed in SEEDS:
            exp = plan(cfg, ID, [seed], [])
            exp.directory = tmp / "runs" / ID / "shards" / str(seed)
            exp.problem_sets = {"benchmarks": SETS}
            rows = {a.name: _rows(a.run_id, seed, a.name == "population") for a in exp.arms}
            for a in exp.arms:
                run_dir = Path(a.cfg.run.output_dir) / a.run_id
                run_dir.mkdir(parents=True)
                (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[a.name]))
                dyn = arm_dynamics(rows[a.name], None, weights=False)
                write_json(exp.out_dir / "dynamics" / f"{a.run_id}.json", {**dyn, "last_step": rows[a.name][-1]["step"]})
                _files(exp, a, rows, seed)
            times = {"training": {"population": 600.0 + seed, "baseline": 300.0}, "scoring": 120.0, "calls": 1}
            shards.export(exp, results, ["populora", "experiment", "--shard", str(seed)], times)
    combine(results)
    return results


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> Path:
    return _make_result(tmp_path_factory.mktemp("recompute"))


def _recompute(results: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coordinator.experiment.recompute", str(results), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def _leaves(x, path: str = "") -> dict[str, object]:
    """Every number (and word) of a JSON tree by its path; a checkpoint's interval name and confidence left out."""
    if isinstance(x, dict):
        return {k2: v for k, v in x.items() if k not in ("interval", "confidence")
                for k2, v in _leaves(v, f"{path}.{k}").items()}
    if isinstance(x, list):
        return {k2: v for i, v in enumerate(x) for k2, v in _leaves(v, f"{path}[{i}]").items()}
    return {path: x}


def test_every_number_of_the_result_comes_back_from_the_shard_files(result):
    scores = json.loads((result / "scores.json").read_text())
    assert scores["shards"]["complete_seeds"] == list(SEEDS)
    assert set(scores["checkpoints"]) == {"heldout", "cruxeval-o", "heldout-logprob", "cruxeval-o-logprob"}
    done = _recompute(result)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    out = json.loads(done.stdout)
    check, numbers = out["check"], out["numbers"]
    assert check["disagree"] == [] and check["readme_compared"] > 100
    # the test's own walk: every number of every checkpoint, the warm start and the births, the same paths and values
    for key in ("checkpoints", "births"):
        mine, theirs = _leaves(numbers[key]), _leaves(scores[key])
        assert mine.keys() == theirs.keys()
        for k, v in theirs.items():
            assert mine[k] == (pytest.approx(v, rel=1e-9, abs=1e-12) if isinstance(v, float) else v), k
    assert numbers["summary"]["warm_start"] == pytest.approx(scores["summary"]["warm_start"], rel=1e-12)
    assert check["compared"] >= len(_leaves(scores["checkpoints"])) + len(_leaves(scores["births"]))
    # what the fixture was made to show: a family left out, students scored, both bootstraps drawn again
    last = numbers["checkpoints"]["heldout"][-1]
    assert last["removed"] == ["reverse_rec x code_f", "reverse_rec x code_i", "reverse_rec x code_o"]
    assert len(last["per_seed"]) == 5 and not last["few_seeds"] and last["seed_t"]["n_seeds"] == 5
    assert last["low"] < last["difference"] < last["high"] and last["variance"]["sd_problem"] > 0
    assert numbers["checkpoints"]["heldout"][0]["n_pairs"] < last["n_pairs"]  # the curve's first problems only
    assert numbers["births"]["mutation"]["student"]["n"] == 5
    assert {s: a["baseline"]["gap"] for s, a in last["arms"].items()}["5"] == 0  # a step on the checkpoint stands
    lines = subprocess.run([sys.executable, "-m", "coordinator.experiment.recompute", str(result)], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert lines.returncode == 0 and "all agree" in lines.stdout and "t(0.975, 4) = 2.7764" in lines.stdout


def _changed_copy(result: Path, tmp_path: Path) -> Path:
    copy = tmp_path / ID
    shutil.copytree(result, copy)
    return copy


def test_a_changed_shard_file_is_named(result, tmp_path):
    copy = _changed_copy(result, tmp_path)
    path = copy / "shards" / "3" / "evals" / f"{ID}-population-s3.json"
    kept = json.loads(path.read_text())
    body = kept["benchmarks"]["heldout"]
    # seed 3's first student at the last checkpoint, on the first problem (a scoring one, of a family kept)
    scored = json.loads((copy / "shards" / "3" / "metrics" / f"{ID}-population-s3.metrics.jsonl").read_text()
                        .splitlines()[-1])["population"]
    name = f"{ID}-population-s3.s0@v{scored[f'{ID}-population-s3.s0']['version']}"
    problem = next(p for r in body["results"] if r["label"] == name for p in r["problems"] if p["id"] == HELDOUT[0])
    problem["passed"] = 1 - problem["passed"]
    path.write_text(json.dumps(kept))
    done = _recompute(copy)
    assert done.returncode == 1
    named = {d["name"] for d in json.loads(done.stdout)["check"]["disagree"]}
    assert {"checkpoints.heldout[100%].difference", "checkpoints.heldout[100%].per_seed.3.difference",
            "checkpoints.heldout[100%].families[gcd x code_o].population", "shards.each.3.outcomes"} <= named
    assert not any(n.startswith("checkpoints.cruxeval-o") or "[50%]" in n for n in named)  # nothing else moved
    assert "checkpoints.heldout[100%].difference" in done.stderr


def test_a_changed_committed_number_is_named(result, tmp_path):
    copy = _changed_copy(result, tmp_path)
    scores = json.loads((copy / "scores.json").read_text())
    scores["checkpoints"]["cruxeval-o-logprob"][0]["seed_t"]["low"] += 1e-6
    (copy / "scores.json").write_text(json.dumps(scores))
    done = _recompute(copy)
    assert done.returncode == 1
    assert [d["name"] for d in json.loads(done.stdout)["check"]["disagree"]] == [
        "checkpoints.cruxeval-o-logprob[50%].seed_t.low"]
    # README.md: a printed difference changed (the scores put back)
    shutil.copyfile(result / "scores.json", copy / "scores.json")
    readme = (copy / "README.md").read_text().splitlines()
    i = next(i for i, line in enumerate(readme) if line.startswith("| heldout | "))
    cells = readme[i].split(" | ")
    cells[3] = f"{float(cells[3].split()[0]) + 0.01:.3f} " + cells[3].split(" ", 1)[1]
    readme[i] = " | ".join(cells)
    (copy / "README.md").write_text("\n".join(readme) + "\n")
    done = _recompute(copy)
    assert done.returncode == 1
    assert [d["name"] for d in json.loads(done.stdout)["check"]["disagree"]] == [
        "README.md: heldout at the last checkpoint"]


def test_no_scores_json_means_nothing_compared_and_no_shards_is_an_error(result, tmp_path):
    copy = _changed_copy(result, tmp_path)
    (copy / "scores.json").unlink()
    done = _recompute(copy)
    assert done.returncode == 0 and json.loads(done.stdout)["check"] is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _recompute(empty).returncode == 2


def test_it_imports_nothing_of_the_project():
    code = ("import json, sys; import coordinator.experiment.recompute; "
            "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True)
    modules = json.loads(done.stdout)
    ours = [m for m in modules if m == "coordinator" or m.startswith("coordinator.")]
    assert ours == ["coordinator", "coordinator.experiment", "coordinator.experiment.recompute"]
    for name in ("populora", "services", "scipy", "torch", "yaml", "pydantic"):
        assert not [m for m in modules if m == name or m.startswith(name + ".")], name
    for init in (ROOT / "coordinator" / "__init__.py", ROOT / "coordinator" / "experiment" / "__init__.py"):
        tree = ast.parse(init.read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))], init


def test_the_t_quantile_is_students():
    assert [round(t_quantile(0.975, df), 3) for df in (1, 2, 3, 4, 9, 30)] == [12.706, 4.303, 3.182, 2.776, 2.262,
                                                                               2.042]
    for df in range(1, 41):
        for p in (0.8, 0.9, 0.975, 0.995):
            assert t_quantile(p, df) == pytest.approx(project_t_quantile(p, df), rel=1e-9)
