"""End-to-end `populora experiment` on cpu-tiny: both arms, the held-out evaluation and the report. After a stop
between the arms and one inside the second, the same command again continues: the first arm is not redone, the second
goes on from its stored phases, and a finished evaluation is never redone."""

from __future__ import annotations

import json

import pytest

from coordinator.cli import main as cli_main
from coordinator.experiment.plan import plan
from coordinator.experiment.runner import run_experiment
from coordinator.run.journal import JournalDB
from coordinator.train import parse_budget, run_training
from populora.config import load_config
from tests.conftest import published_benchmarks
from tests.e2e.conftest import e2e_overrides, with_overlap

BUDGET = 2e12  # a population step is ~1.5e12 FLOPs here (four proposals a teacher), a baseline step about half


class Stopped(Exception):  # noqa: N818 - the stand-in for a stop (Ctrl-C, a killed process) between two arms
    pass


def test_experiment_runs_both_arms_and_resumes_after_stops(tmp_path, echo_model, heldout_overlap):
    published_benchmarks("cruxeval.jsonl")  # eval.benchmarks: CRUXEval-O and -I, read from $POPULORA_BENCHMARKS
    sets = e2e_overrides(tmp_path, echo_model) + ["run.steps=5"]
    budget = f"flops={BUDGET:.2e}"
    argv = ["experiment", "--preset", "cpu-tiny", "--budget", budget, "--id", "exp", "--limit", "3"]
    for s in sets:
        argv += ["--set", s]

    # the first call: the same config the command builds; stopped right after the first arm
    cfg = load_config(preset="cpu-tiny", overrides=sets)
    cfg.run.budget_flops = parse_budget(budget)["flops"]
    exp = plan(cfg, "exp", [cfg.run.seed], [], limit=3)
    with_overlap(exp, heldout_overlap)
    db = JournalDB(cfg.league_db_url)
    pop, base = (a.run_id for a in exp.arms)

    def stop(arm):
        if arm.run_id == pop:
            raise Stopped

    with pytest.raises(Stopped):
        run_experiment(exp, db, after_arm=stop)
    assert db.get_run(pop)["status"] == "finished" and db.get_run(base) is None
    first_arm = db.phase_rows(pop)
    assert first_arm and not (exp.out_dir / "evals").exists()
    # ... and the second arm stopped inside: its step 0 stored, its run not finished
    partial = exp.arms[1].cfg.model_copy(deep=True)
    partial.run.steps = 0
    db.create_run(base, partial.run.mode, exp.arms[1].cfg.to_yaml())
    run_training(partial, base, db)
    db.set_status(base, "stopped")
    base_step0 = db.phase_rows(base)
    assert {r["step"] for r in base_step0} == {0}

    # the same command again: the first arm is not redone, the second runs, both are scored, the report is written
    assert cli_main(argv) == 0
    assert db.phase_rows(pop) == first_arm  # no phase of arm one ran again (same rows, same finish times)
    assert db.get_run(base)["status"] == "finished"
    base_rows = db.phase_rows(base)
    assert [r for r in base_rows if r["step"] == 0] == base_step0  # arm two went on from where it stopped
    assert max(r["step"] for r in base_rows) >= 1
    assert {r["phase"] for r in base_rows} >= {"warmstart", "init", "seed", "account", "propose", "update"}
    assert all(r["attempts"] == 1 for r in base_rows)

    scores = json.loads((exp.out_dir / "scores.json").read_text())
    assert set(scores["arms"]) == {pop, base} and scores["budget"]["flops"] == BUDGET
    # the published benchmarks of eval.benchmarks are scored with heldout, from $POPULORA_BENCHMARKS, in kept parts
    assert set(scores["benchmarks"]) == {"heldout", "cruxeval-o", "cruxeval-i"}
    assert {p.name for p in (exp.out_dir / "evalparts").iterdir()} == {
        f"s{cfg.run.seed}.{b}.000.json" for b in ("heldout", "cruxeval-o", "cruxeval-i")}
    assert json.loads((exp.out_dir / "evals" / f"{pop}.cruxeval-o.json").read_text())["limit"] == 3
    for run_id, n in scores["arms"].items():
        metrics = [json.loads(x) for x in (tmp_path / "runs" / run_id / "metrics.jsonl").read_text().splitlines()]
        spent = metrics[-1]["compute_cumulative"]
        assert n["budget_flops"] == spent["budget_flops"] >= BUDGET  # stopped by the budget
        assert spent["flops"] == spent["budget_flops"] + spent["phase_flops"].get("warm_start", 0)
        assert metrics[-1]["stopped"].startswith("budget: flops") and n["steps"] == len(metrics) - 1
        held = n["evals"]["heldout"]
        # the members scored are the population at the last checkpoint (the last step not past the budget)
        at = scores["checkpoints"]["heldout"][-1]["arms"][str(cfg.run.seed)][n["arm"]]["step"]
        assert at == len(metrics) - 2 and metrics[at]["compute_cumulative"]["budget_flops"] <= BUDGET
        assert held["n_problems"] == 3 and set(held["members"]) == set(metrics[at]["population"])
        assert all(0.0 <= m["pass_at_1"] <= 1.0 for m in held["members"].values())
    raw = json.loads((exp.out_dir / "evals" / f"{base}.heldout.json").read_text())
    assert raw["benchmark"] == "heldout" and raw["limit"] == 3
    assert {r["adapter_id"] for r in raw["results"]} >= {f"{base}.B0"}
    assert scores["summary"]["population"]["runs"] == scores["summary"]["baseline"]["runs"] == 1
    # equal compute: both arms at the four checkpoints of the compute the arms ended with (a token budget)
    cps = scores["checkpoints"]["heldout"]
    assert [c["fraction"] for c in cps] == [0.25, 0.5, 0.75, 1.0]
    for c in cps:
        for arm in c["arms"][str(cfg.run.seed)].values():
            assert arm["gap"] is None or arm["gap"] >= 0
        if "difference" in c:
            assert c["low"] <= c["difference"] <= c["high"] and c["n_pairs"] == 3
            assert sum(c["counts"].values()) == 3 * len(scores["arms"][pop]["population"])
    assert "difference" in cps[-1]
    assert set(scores["dynamics"]) == {"population", "baseline"}
    for png in ("rates.png", "complexity.png", "ratings.png", "compute.png", "evals.png", "dynamics.png",
                "checkpoints.png"):
        assert (exp.out_dir / png).stat().st_size > 1000, png
    page = (exp.out_dir / "report.html").read_text()
    assert pop in page and base in page and "heldout pass@1" in page and "At equal compute" in page

    # once more: nothing is trained or evaluated again
    evals_before = {p.name: p.read_text() for p in (exp.out_dir / "evals").iterdir()}
    again = run_experiment(plan(cfg, "exp", [cfg.run.seed], [], limit=3), db)
    assert again.trained == [] and again.evaluated == []
    assert {p.name: p.read_text() for p in (exp.out_dir / "evals").iterdir()} == evals_before
    assert db.phase_rows(base) == base_rows
    db.close()


def test_seeds_run_in_processes_of_their_own_with_the_scoring_chosen(tmp_path, echo_model, capfd, heldout_overlap):
    """`--jobs 2`: two seeds trained and scored at once, each in a spawned process; eval.members and eval.checkpoints
    say which versions are scored. A rerun with the same jobs does nothing again."""
    # heldout alone: the first test scores the published benchmarks too, and each costs minutes on a loaded machine;
    # one step an arm: the scoring chosen and the processes are what this test is about, not how far the arms train
    sets = e2e_overrides(tmp_path, echo_model) + ["run.steps=1", "eval.members=students", "eval.checkpoints=[0.5,1.0]",
                                                  "eval.benchmarks=[]"]
    argv = ["experiment", "--preset", "cpu-tiny", "--budget", f"flops={BUDGET:.2e}", "--id", "par", "--limit", "5",
            "--seeds", "1,2"]
    for s in sets:
        argv += ["--set", s]
    cfg = load_config(preset="cpu-tiny", overrides=sets)
    cfg.run.budget_flops = parse_budget(f"flops={BUDGET:.2e}")["flops"]
    exp = plan(cfg, "par", [1, 2], [], limit=5)
    with_overlap(exp, heldout_overlap)
    assert cli_main(argv + ["--jobs", "2"]) == 0
    err = capfd.readouterr().err  # the spawned processes write to the same stderr, each line tagged with its seed
    assert "[seed 1]" in err and "[seed 2]" in err
    db = JournalDB(cfg.league_db_url)
    assert all(db.get_run(a.run_id)["status"] == "finished" for a in exp.arms)
    scores = json.loads((exp.out_dir / "scores.json").read_text())
    assert scores["eval"]["members"] == "students" and scores["eval"]["checkpoints"] == [0.5, 1.0]
    cps = scores["checkpoints"]["heldout"]
    assert [c["fraction"] for c in cps] == [0.5, 1.0] and cps[-1]["seeds"] == [1, 2]
    for a in exp.arms:
        raw = json.loads((exp.out_dir / "evals" / f"{a.run_id}.heldout.json").read_text())
        metrics = [json.loads(x) for x in (tmp_path / "runs" / a.run_id / "metrics.jsonl").read_text().splitlines()]
        roles = {m["role"] for r in metrics for m in r.get("population", {}).values()}
        scored = {r["adapter_id"] for r in raw["results"]} - {f"{exp.arms[0].run_id}.warm"}
        assert scored and all(not t.split(".")[-1].startswith("T") for t in scored), scored
        if a.name == "population":
            assert "teacher" in roles  # teachers were there, and were left out of the scoring
    # the same experiment again (one seed at a time: what is done does not depend on how it ran): all found done
    before = {p.name: p.read_text() for p in (exp.out_dir / "evals").iterdir()}
    phases = {a.run_id: db.phase_rows(a.run_id) for a in exp.arms}
    assert cli_main(argv) == 0
    assert {p.name: p.read_text() for p in (exp.out_dir / "evals").iterdir()} == before
    assert {a.run_id: db.phase_rows(a.run_id) for a in exp.arms} == phases
    db.close()
