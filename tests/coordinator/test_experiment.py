"""`populora experiment` without a model: its arms, ids, refusals, and the comparison's arithmetic."""

from __future__ import annotations

import json
import math
import random
from statistics import mean, pstdev

import pytest

from coordinator.experiment.comparison import arm_numbers, eval_numbers, pooled
from coordinator.experiment.plan import check_manifest, default_id, parse_arms, parse_seeds, plan
from coordinator.record.stepmetrics import complexity_spread
from populora.config import ConfigError, load_config


def _cfg(tmp_path, *extra: str):
    return load_config(preset="cpu-tiny", env=False, overrides=[f"run.output_dir={tmp_path / 'runs'}",
                                                                "run.budget_tokens=5000", *extra])


def test_parse_seeds():
    assert parse_seeds("1,2", 0) == [1, 2]
    assert parse_seeds(" 3 ", 0) == [3]
    assert parse_seeds(None, 7) == [7]
    for bad, says in (("1,x", "'x' is not an integer"), ("1,1", "distinct"), (",", "one or more")):
        with pytest.raises(ConfigError, match=says):
            parse_seeds(bad, 0)


def test_arms_share_warm_start_seeds_and_budget(tmp_path):
    exp = plan(_cfg(tmp_path, "warmstart.enabled=true"), "e1", [1, 2], ["humaneval", "heldout"])
    assert [(a.name, a.seed, a.run_id) for a in exp.arms] == [
        ("population", 1, "e1-population-s1"), ("baseline", 1, "e1-baseline-s1"),
        ("population", 2, "e1-population-s2"), ("baseline", 2, "e1-baseline-s2")]
    # heldout always, first, once; then eval.benchmarks (CRUXEval-O and -I unless the config says otherwise)
    assert exp.benchmarks == ["heldout", "cruxeval-o", "cruxeval-i", "humaneval"]
    assert plan(_cfg(tmp_path, "eval.benchmarks=[]"), "e1", [1], ["humaneval"]).benchmarks == ["heldout", "humaneval"]
    pop, base = exp.arms[0].cfg, exp.arms[1].cfg
    assert (pop.run.mode, pop.population.n_teachers, pop.rewards.teacher_reward) == ("population", 2, "inverse_solve")
    assert (base.run.mode, base.population.n_teachers, base.population.n_students,
            base.rewards.teacher_reward) == ("baseline", 1, 1, "learnability")
    for a in exp.arms:
        assert a.cfg.warmstart == pop.warmstart and a.cfg.warmstart.enabled  # the same warm adapter (one digest)
        assert a.cfg.run.budget_tokens == 5000 and a.cfg.run.seed == a.seed and a.cfg.run.run_id == a.run_id


def test_a_mixed_rank_arm_beside_the_uniform_population_and_the_baseline(tmp_path):
    """`--arms population,mixed-rank,baseline` (spec 9, "Mixed ranks"): the mixed-rank arm's members at r/4..2r of
    lora.rank (cpu-tiny's 8: 2, 4, 8, 16), the population arm every member at lora.rank, all three from one warm
    start and budget; the default arms and their id are unchanged."""
    assert parse_arms(None) == ["population", "baseline"]
    arms = parse_arms("population,mixed-rank,baseline")
    for bad in ("population,nope", "baseline,baseline", ","):
        with pytest.raises(ConfigError, match="--arms"):
            parse_arms(bad)
    exp = plan(_cfg(tmp_path, "warmstart.enabled=true", "evolution.operator_mix={M1: 1, R1: 1}",
                    "evolution.ranks=[16]"), "e1", [1], [], arms=arms)
    assert [(a.name, a.run_id) for a in exp.arms] == [("population", "e1-population-s1"),
                                                      ("mixed-rank", "e1-mixed-rank-s1"), ("baseline", "e1-baseline-s1")]
    pop, mixed, base = (a.cfg for a in exp.arms)
    assert (mixed.run.mode, mixed.lora.teacher_ranks, mixed.lora.student_ranks) == ("population", [2, 4, 8, 16],
                                                                                       [2, 4, 8, 16])
    assert mixed.ranks == [2, 4, 8, 16] and mixed.evolution.operator_mix == {"M1": 1, "R1": 1}
    assert pop.ranks == [8] and pop.evolution.operator_mix == {"M1": 1} and base.ranks == [8]
    assert all(a.cfg.warmstart == pop.warmstart and a.cfg.run.budget_tokens == 5000 for a in exp.arms)
    given = plan(_cfg(tmp_path, "lora.teacher_ranks=[4, 32]"), "e1", [1], [], arms=arms)
    assert given.arms[1].cfg.lora.teacher_ranks == [4, 32] and given.arms[0].cfg.lora.teacher_ranks == []
    assert plan(_cfg(tmp_path, "lora.teacher_ranks=[4, 32]"), "e1", [1], []).arms[0].cfg.lora.teacher_ranks == [4, 32]
    cfg = _cfg(tmp_path)
    assert default_id(cfg, "t", [1], ["population", "baseline"]) == default_id(cfg, "t", [1])
    assert default_id(cfg, "t", [1], arms) != default_id(cfg, "t", [1])


def test_bad_requests_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="give a budget"):
        plan(load_config(preset="cpu-tiny", env=False), "e1", [1], [])
    with pytest.raises(ConfigError, match="--id"):
        plan(_cfg(tmp_path), "../x", [1], [])
    with pytest.raises(ConfigError, match="--limit 0"):
        plan(_cfg(tmp_path), "e1", [1], [], limit=0)
    with pytest.raises(ConfigError, match="--samples 0"):
        plan(_cfg(tmp_path), "e1", [1], [], samples=0)
    with pytest.raises(ConfigError, match="eval.temperature"):
        plan(_cfg(tmp_path), "e1", [1], [], samples=4)
    assert plan(_cfg(tmp_path, "eval.temperature=0.8"), "e1", [1], [], samples=4).samples == 4
    with pytest.raises(ConfigError, match="--benchmark 'nope': unknown"):
        plan(_cfg(tmp_path), "e1", [1], ["nope"])


def test_default_id_is_the_same_for_the_same_request(tmp_path):
    a, b = _cfg(tmp_path), _cfg(tmp_path)
    assert default_id(a, "cpu-tiny", [1]) == default_id(b, "cpu-tiny", [1])
    assert default_id(a, "cpu-tiny", [1]).startswith("cpu-tiny-exp-")
    assert default_id(a, "cpu-tiny", [1, 2]) != default_id(a, "cpu-tiny", [1])
    assert default_id(_cfg(tmp_path, "run.budget_tokens=6000"), "cpu-tiny", [1]) != default_id(a, "cpu-tiny", [1])


def test_an_id_used_for_another_experiment_is_refused(tmp_path):
    exp = plan(_cfg(tmp_path), "e1", [1], [])
    assert not check_manifest(exp)
    exp.out_dir.mkdir(parents=True)
    (exp.out_dir / "experiment.json").write_text(json.dumps(exp.manifest()))
    assert check_manifest(plan(_cfg(tmp_path), "e1", [1], ["humaneval"]))  # same arms; another benchmark is fine
    before = (exp.out_dir / "experiment.json").read_text()
    with pytest.raises(ConfigError, match="another config_yaml.*pass a new --id"):
        check_manifest(plan(_cfg(tmp_path, "trainer.lr=0.5"), "e1", [1], []))
    with pytest.raises(ConfigError, match="another seeds"):
        check_manifest(plan(_cfg(tmp_path), "e1", [1, 2], []))
    # an arm has spent 4,500 tokens and 20 sandbox jobs in 2 steps: limits below that are refused
    run_dir = tmp_path / "runs" / exp.arms[0].run_id
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text(json.dumps(
        {"step": 2, "compute_cumulative": {"tokens": 4500, "sandbox_jobs": 20, "budget_flops": 0}}) + "\n")
    with pytest.raises(ConfigError, match=r"larger budget_tokens \(5000, now 4000; an arm has spent 4500\).*grow"):
        check_manifest(plan(_cfg(tmp_path, "run.budget_tokens=4000"), "e1", [1], []))
    with pytest.raises(ConfigError, match="larger budget_sandbox_jobs"):  # 0 was no budget: any is smaller
        check_manifest(plan(_cfg(tmp_path, "run.budget_sandbox_jobs=9"), "e1", [1], []))
    with pytest.raises(ConfigError, match="larger max_steps"):
        check_manifest(plan(_cfg(tmp_path, "run.steps=1"), "e1", [1], []))
    assert (exp.out_dir / "experiment.json").read_text() == before
    # ... and those no arm has reached end the arms there
    assert check_manifest(plan(_cfg(tmp_path, "run.budget_tokens=4800", "run.budget_sandbox_jobs=30"), "e1", [1], []))
    # a larger budget or step cap continues the same experiment
    assert check_manifest(plan(_cfg(tmp_path, "run.budget_tokens=9000", "run.steps=9"), "e1", [1], []))


def test_pooled_spread_equals_the_spread_over_all_programs():
    rng = random.Random(0)
    steps = [[rng.randint(1, 9) for _ in range(rng.randint(1, 6))] for _ in range(5)]
    spreads = [complexity_spread([{"ast_depth": x, "cyclomatic": 1, "lines_of_code": x} for x in xs])["ast_depth"]
               for xs in steps]
    flat = [x for xs in steps for x in xs]
    got = pooled(spreads + [complexity_spread([])["ast_depth"]])  # a step without valid programs adds nothing
    assert got["n"] == len(flat)
    assert math.isclose(got["mean"], mean(flat)) and math.isclose(got["std"], pstdev(flat), abs_tol=1e-9)
    assert pooled([]) == {"mean": None, "std": None, "n": 0}


def test_arm_numbers_and_eval_numbers():
    def row(step, tokens, solve, depth):
        return {"step": step, "step_seconds": 10.0, "solve_rate": solve, "valid_rate": 0.5,
                "compute_cumulative": {"tokens": tokens, "generated_tokens": tokens // 2,
                                       "trained_tokens": tokens - tokens // 2, "sandbox_jobs": step},
                "complexity": complexity_spread([{"ast_depth": d, "cyclomatic": 1, "lines_of_code": 2}
                                                 for d in depth]),
                "ratings": {"r.T0": {"mu": 26.0, "sigma": 7.0, "skill": 5.0, "role": "teacher"}},
                "population": {"r.T0": {"role": "teacher", "version": step + 1},
                               "r.S0": {"role": "student", "version": step + 1}}}

    rows = [{"step": 0, "step_seconds": 5.0, "compute_cumulative": {"tokens": 100}},
            row(1, 300, 0.2, [4, 6]), row(2, 500, 0.4, [8]), row(3, 700, None, [])]
    n = arm_numbers(rows)
    assert (n["steps"], n["tokens"], n["step0_tokens"], n["wall_seconds"]) == (3, 700, 100, 35.0)
    assert n["solve_rate"]["first_half"] == pytest.approx(0.3) and n["solve_rate"]["second_half"] is None
    assert n["complexity"]["ast_depth"]["all"]["mean"] == pytest.approx(6.0)
    assert n["complexity"]["ast_depth"]["first_half"]["std"] == pytest.approx(pstdev([4, 6, 8]))
    scores = {"samples": 1, "limit": 3, "results": [
        {"adapter_id": "r.warm", "version": 1, "label": "warm", "pass_at_1": 0.1, "n_problems": 3},
        {"adapter_id": "r.T0", "version": 4, "label": "T0", "pass_at_1": 0.0, "n_problems": 3},
        {"adapter_id": "r.S0", "version": 4, "label": "S0", "pass_at_1": 2 / 3, "n_problems": 3}]}
    e = eval_numbers(scores, "r", n["population"])
    assert e["start"] == 0.1 and "best" not in e and e["students_mean"] == pytest.approx(2 / 3)
    assert e["mean"] == pytest.approx(1 / 3) and set(e["members"]) == {"r.T0", "r.S0"}


def test_a_member_retired_after_the_checkpoint_keeps_the_role_it_had_there():
    """Seed 2 of docs/results: two students scored at step 14, one of them retired before the run ended. Its role
    looked up in the final population was "" and it dropped out of the students' mean (0.137 reported, 0.145 in the
    files); looked up at the checkpoint it stays in."""
    rows = [{"step": 14, "population": {"r.S1": {"role": "student", "version": 3},
                                        "r.S2": {"role": "student", "version": 7}}},
            {"step": 15, "population": {"r.S1": {"role": "student", "version": 4},
                                        "r.S3": {"role": "student", "version": 1}}}]
    scores = {"targets": {"r.S1@v3": 14, "r.S2@v7": 14}, "results": [
        {"adapter_id": "r.S1", "version": 3, "label": "r.S1@v3", "pass_at_1": 0.137, "n_problems": 380},
        {"adapter_id": "r.S2", "version": 7, "label": "r.S2@v7", "pass_at_1": 0.153, "n_problems": 380}]}
    final = rows[-1]["population"]
    e = eval_numbers(scores, "r", final, rows)
    assert {m: v["role"] for m, v in e["members"].items()} == {"r.S1": "student", "r.S2": "student"}
    assert e["students_mean"] == pytest.approx(0.145)
    # what the final population alone gave: the retired student's role unknown, so not a student
    assert eval_numbers(scores, "r", final)["students_mean"] == pytest.approx(0.137)


def test_cpu_experiment_preset_is_cpu_smol_with_a_step_cap():
    """Its comment promises cpu-smol's settings (the same warm-start cache, the measurements of docs/warmstart.md)
    but for the ones it names: how the update uses the machine, reproducibility and what is scored."""
    smol = load_config(preset="cpu-smol", env=False).model_dump()
    exp = load_config(preset="cpu-smol-experiment", env=False).model_dump()
    assert exp["run"].pop("steps") > smol["run"].pop("steps")
    assert exp["run"].pop("reproducible") and not smol["run"].pop("reproducible")
    assert exp["eval"].pop("max_new_tokens") == exp["generation"]["max_new_tokens"]  # as long as training answers
    # run.reproducible: the -1 (the free cores) of both becomes one thread; no checkpointing in either
    assert (smol["trainer"].pop("threads"), smol["generation"].pop("threads")) == (-1, -1)
    assert (exp["trainer"].pop("threads"), exp["generation"].pop("threads")) == (1, 1)
    assert exp["trainer"].pop("activation_checkpointing") is smol["trainer"].pop("activation_checkpointing") is False
    assert (exp["eval"].pop("checkpoints"), exp["eval"].pop("members")) == ([1.0], "students")
    for key in ("max_new_tokens", "checkpoints", "members"):
        smol["eval"].pop(key)
    assert exp == smol


def test_an_arm_is_finished_when_its_metrics_reach_its_limits(tmp_path):
    from coordinator.experiment.runner import arm_finished
    from coordinator.run.journal import JournalDB

    exp = plan(_cfg(tmp_path, f"league.db_url=sqlite:///{tmp_path / 'j.sqlite'}"), "e1", [1], [])
    arm = exp.arms[0]
    db = JournalDB(arm.cfg.league_db_url)
    assert not arm_finished(db, arm)  # never started
    db.create_run(arm.run_id, "population", arm.cfg.to_yaml())
    run_dir = tmp_path / "runs" / arm.run_id
    run_dir.mkdir(parents=True)
    spent = {"generated_tokens": 2000, "trained_tokens": 3100, "sandbox_jobs": 9, "tokens": 5100}
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 2, "compute_cumulative": spent}) + "\n")
    assert not arm_finished(db, arm)  # still running (or stopped): not finished whatever its metrics say
    db.set_status(arm.run_id, "finished")
    assert arm_finished(db, arm)  # 5100 >= 5000
    grown = plan(_cfg(tmp_path, f"league.db_url=sqlite:///{tmp_path / 'j.sqlite'}", "run.budget_tokens=8000"),
                 "e1", [1], []).arms[0]
    assert not arm_finished(db, grown)  # a larger budget: the arm goes on
    capped = plan(_cfg(tmp_path, f"league.db_url=sqlite:///{tmp_path / 'j.sqlite'}", "run.budget_tokens=8000",
                       "run.steps=2"), "e1", [1], []).arms[0]
    assert arm_finished(db, capped)  # ... unless it is at its step cap
    db.close()


def test_a_done_evaluation_is_read_back_not_redone(tmp_path):
    from coordinator.experiment.armeval import arm_state, eval_settings, experiment_budget
    from coordinator.experiment.evalfiles import eval_path
    from coordinator.experiment.seedeval import evaluate_arms

    exp = plan(_cfg(tmp_path), "e1", [1], ["humaneval"], limit=2)
    for arm in exp.arms:
        run_dir = tmp_path / "runs" / arm.run_id
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 3, "compute_cumulative": {"tokens": 5100}}) + "\n")
        assert arm_state(arm) == {"step": 3, "tokens": 5100}
        for benchmark in exp.benchmarks:
            path = eval_path(exp.out_dir, arm.run_id, benchmark)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"benchmark": benchmark, "settings": eval_settings(exp),
                                        "trained": arm_state(arm), "budget": experiment_budget(exp),
                                        "results": []}))
    assert evaluate_arms(exp) == []  # nothing to do: no model is loaded, no file changes
    assert eval_settings(exp)["limit"] == 2 and eval_settings(plan(_cfg(tmp_path), "e1", [1], []))["limit"] is None


def test_eval_checkpoints_are_fractions_of_the_budget(tmp_path):
    assert _cfg(tmp_path, "eval.checkpoints=[1.0,0.5]").eval.checkpoints == [0.5, 1.0]
    for bad in ("[0]", "[1.5]", "[0.5,0.5]", "[]"):
        with pytest.raises(ConfigError, match="checkpoints"):
            _cfg(tmp_path, f"eval.checkpoints={bad}")
    with pytest.raises(ConfigError, match="members"):
        _cfg(tmp_path, "eval.members=teachers")


def test_jobs_below_one_are_refused(tmp_path, capsys):
    from coordinator.cli import main as cli_main

    assert cli_main(["experiment", "--preset", "cpu-tiny", "--budget", "flops=1e12", "--jobs", "0",
                     "--set", f"run.output_dir={tmp_path / 'runs'}"]) == 2
    assert "--jobs 0" in capsys.readouterr().err and not (tmp_path / "runs").exists()
