"""Shards and problem sets, without training: a shard's name, the problem sets drawn once and then fixed (the same
settings and data give the same file; other settings are refused), the likelihood set only for task benchmarks, a
likelihood file compared as a pass file is, and a result refused from shards of two experiments."""

from __future__ import annotations

import json

import pytest

from coordinator.experiment.checkpointeval import per_problem
from coordinator.experiment.headline import headline, measured
from coordinator.experiment.problemsets import draw, ensure, make, subset
from coordinator.experiment.shardresult import combine
from coordinator.experiment.shards import ShardSpec, command_of, parse_shard
from populora.config import ConfigError, load_config
from populora.evals.problem import Problem


def _cfg(**eval_fields):
    return load_config(preset="cpu-tiny", env=False, overrides=[f"eval.{k}={v}" for k, v in eval_fields.items()])


def _problems(benchmark: str) -> list[Problem]:
    apart = {"p/3"} if benchmark == "cruxeval-o" else set()
    return [Problem(f"p/{i}", "task", set_apart="its output is no literal" if f"p/{i}" in apart else "")
            for i in range(40)]


def test_a_shard_is_a_seed_or_a_seed_and_an_arm():
    assert parse_shard("3") == ShardSpec(3) and ShardSpec(3).name == "3"
    assert parse_shard("2:baseline") == ShardSpec(2, "baseline") and ShardSpec(2, "baseline").name == "2-baseline"
    for bad in ("x", "2:teachers", ""):
        with pytest.raises(ConfigError, match="--shard"):
            parse_shard(bad)


def test_the_problem_sets_are_drawn_once_and_then_fixed(tmp_path):
    cfg = _cfg(pass_problems=5, likelihood_problems=12, subset_seed=7)
    path = tmp_path / "problems.json"
    sets = ensure(path, cfg, None, ["heldout", "cruxeval-o", "humaneval"], _problems)
    crux = sets["benchmarks"]["cruxeval-o"]
    assert len(crux["pass"]) == 5 and len(crux["likelihood"]) == 12 and crux["pass"] == crux["likelihood"][:5]
    assert "p/3" not in crux["likelihood"] and crux["set_apart"] == 1 and crux["of"] == 40
    assert "likelihood" not in sets["benchmarks"]["humaneval"]  # a program benchmark has no reference answer to score
    assert subset(sets, "humaneval", "likelihood") is None and subset(sets, "heldout", "pass") == \
        sets["benchmarks"]["heldout"]["pass"]
    assert sets["benchmarks"]["heldout"]["pass"] != crux["pass"]  # each benchmark its own draw
    # the same settings and data draw the same sets; once the file is there it is read, not drawn
    again = ensure(tmp_path / "other.json", cfg, None, ["heldout", "cruxeval-o", "humaneval"], _problems)
    assert again == sets
    assert ensure(path, cfg, None, ["heldout"], lambda b: pytest.fail("drawn again")) == sets
    assert draw([f"p/{i}" for i in range(40)], 5, 8, "heldout") != sets["benchmarks"]["heldout"]["pass"]
    with pytest.raises(ConfigError, match="were drawn with"):
        ensure(path, _cfg(pass_problems=6, likelihood_problems=12, subset_seed=7), None, ["heldout"], _problems)
    # a benchmark scored later is added to the file, the others kept
    grown = ensure(path, cfg, None, ["heldout", "cruxeval-i"], _problems)
    assert grown["benchmarks"]["cruxeval-o"] == crux and len(grown["benchmarks"]["cruxeval-i"]["likelihood"]) == 12
    assert json.loads(path.read_text()) == grown


def test_without_pass_problems_every_problem_is_answered():
    cfg = _cfg(likelihood_problems=4)
    made = make(cfg, None, ["cruxeval-o"], _problems)["benchmarks"]["cruxeval-o"]
    assert made["pass"] == [f"p/{i}" for i in range(40)] and len(made["likelihood"]) == 4


def test_a_likelihood_file_is_compared_as_a_pass_file_is():
    scores = {"kind": "logprob", "results": [
        {"label": "a@v1", "problems": [{"id": "x", "logprob": -3.0, "tokens": 2, "value": -1.5},
                                       {"id": "y", "logprob": -1.0, "tokens": 4, "value": -0.25}]}]}
    ids, values = per_problem(scores)
    assert ids == ["x", "y"] and values == {"a@v1": {"x": -1.5, "y": -0.25}}
    assert measured("heldout-logprob") == "heldout" and measured("cruxeval-o") == "cruxeval-o"
    pop = {1: {"heldout/0/code_o/gcd": [-1.0, -0.5], "heldout/1/code_i/window": [-2.0, -1.0]},
           2: {"heldout/0/code_o/gcd": [-0.8, -0.6], "heldout/1/code_i/window": [-1.5, -1.1]}}
    base = {1: {"heldout/0/code_o/gcd": -1.0, "heldout/1/code_i/window": -2.0},
            2: {"heldout/0/code_o/gcd": -0.9, "heldout/1/code_i/window": -1.6}}
    out = headline("heldout-logprob", pop, base, n_resamples=200)
    assert out["difference"] == pytest.approx(((0.25 + 0.5) / 2 + (0.2 + 0.3) / 2) / 2)
    assert out["counts"] is None and [f["family"] for f in out["families"]] == ["gcd x code_o", "window x code_i"]


def _fake_shard(root, name: str, seed: int, arms: dict[str, str], config: str, **fields) -> None:
    d = root / "shards" / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(config)
    body = {"experiment_id": "e", "shard": name, "seed": seed, "arms": arms, "benchmarks": ["heldout"],
            "budget_flops": 1e12, "max_steps": 3, "limit": None, "samples": 1, "problem_sets": "abc"}
    (d / "shard.json").write_text(json.dumps({**body, **fields}))


def test_a_result_is_refused_from_shards_of_two_experiments_or_an_arm_twice(tmp_path):
    cfg = load_config(preset="cpu-tiny", env=False).to_yaml()
    assert combine(tmp_path / "none") is None
    _fake_shard(tmp_path / "a", "1", 1, {"population": "e-population-s1", "baseline": "e-baseline-s1"}, cfg)
    _fake_shard(tmp_path / "a", "2", 2, {"population": "e-population-s2", "baseline": "e-baseline-s2"}, cfg,
                budget_flops=2e12)
    with pytest.raises(ConfigError, match="shard 2 differs from shard 1 in budget_flops"):
        combine(tmp_path / "a")
    _fake_shard(tmp_path / "b", "1", 1, {"population": "e-population-s1", "baseline": "e-baseline-s1"}, cfg)
    _fake_shard(tmp_path / "b", "1-baseline", 1, {"baseline": "e-baseline-s1"}, cfg)
    with pytest.raises(ConfigError, match="baseline arm of seed 1 is in shards 1 and 1-baseline"):
        combine(tmp_path / "b")
    _fake_shard(tmp_path / "c", "1", 1, {"population": "e-population-s1"}, cfg)
    _fake_shard(tmp_path / "c", "2", 2, {"population": "e-population-s2"}, cfg.replace("steps: 3", "steps: 4"))
    with pytest.raises(ConfigError, match="in config"):
        combine(tmp_path / "c")


def test_the_command_of_a_shard_runs_it_again():
    import argparse

    args = argparse.Namespace(config_file=None, preset="cpu-smol-experiment-4t4s", budget="flops=5e13",
                              experiment_id=None, steps=None, limit=None, samples=1, benchmark=[],
                              overrides=["eval.pass_problems=40"], results="docs/results")
    assert command_of(args, ShardSpec(2, "mixed-rank")) == [
        "populora", "experiment", "--preset", "cpu-smol-experiment-4t4s", "--budget", "flops=5e13", "--shard",
        "2:mixed-rank", "--set", "eval.pass_problems=40"]


def test_the_committed_problem_sets_are_those_the_documented_shard_command_scores():
    """docs/results/<id>/problems.json, fixed before the first shard, is read (not drawn again) by the command
    docs/experiment.md gives for the shards, and its held-out ids are problems that command generates."""
    from pathlib import Path

    from coordinator.experiment.plan import default_id
    from coordinator.experiment.shardconfig import continued_id
    from populora.evals import load_problems

    cfg = load_config(preset="cpu-smol-experiment-4t4s", env=False, overrides=[
        "eval.checkpoints=[0.5,1.0]", "eval.curve_limit=50", "eval.pass_problems=30", "eval.likelihood_problems=100"])
    cfg.run.budget_flops, cfg.run.reproducible = int(6e13), True  # --budget flops=6e13; --shard (shard_experiment)
    cfg.run.run_id = ""
    experiment_id = default_id(cfg, "cpu-smol-experiment-4t4s", [])
    results = Path(__file__).resolve().parents[2] / "docs" / "results"
    # settings the code gained since the first shard (at their defaults) leave the shard command on that experiment
    experiment_id = continued_id(results, "cpu-smol-experiment-4t4s", cfg) or experiment_id
    path = results / experiment_id / "problems.json"
    assert path.is_file(), f"the shards' problem sets of {experiment_id} are not committed"
    sets = ensure(path, cfg, None, ["heldout", "cruxeval-o", "cruxeval-i"], lambda b: pytest.fail("drawn again"))
    heldout = {p.id for p in load_problems("heldout", None, 380, cfg.eval.heldout_seed, cfg.tasks.code_f_inputs)}
    assert set(sets["benchmarks"]["heldout"]["likelihood"]) <= heldout
    assert [len(sets["benchmarks"][b]["likelihood"]) for b in ("heldout", "cruxeval-o", "cruxeval-i")] == [100] * 3


def test_a_shard_commits_outcomes_not_the_checkers_messages():
    """A checker's message quotes the benchmark's reference answer; a shard's eval file keeps ids and outcomes."""
    from coordinator.experiment.shards import outcomes, without_answers

    body = {"results": [{"label": "a@v1", "problems": [
        {"id": "sample_1", "n": 1, "passed": 0, "error": "wrong: got 'x', expected 'secret'"},
        {"id": "sample_2", "n": 1, "passed": 1}]}]}
    before = outcomes({"f": json.loads(json.dumps(body))})
    kept = without_answers(body)
    assert "secret" not in json.dumps(kept)
    assert kept["results"][0]["problems"][0] == {"id": "sample_1", "n": 1, "passed": 0}
    assert outcomes({"f": kept}) == before


def test_a_setting_added_at_its_default_continues_the_experiment_and_any_other_difference_is_refused(tmp_path):
    """A shard of an experiment whose first shard ran before the code gained a setting: at its default the shard
    continues that experiment (found without --id, its committed config.yaml kept); anything else is refused,
    named."""
    import yaml

    from coordinator.experiment.plan import default_id
    from coordinator.experiment.shardconfig import compare, continued_id, continues, defaults
    from populora.config import ConfigError

    cfg = load_config(preset="cpu-tiny", env=False)
    tree = yaml.safe_load(cfg.to_yaml())
    old = {k: ({kk: vv for kk, vv in v.items() if kk != "batch_invariant"} if k == "generation" else v)
           for k, v in tree.items()}  # the config as the code wrote it before generation.batch_invariant existed
    old_text = yaml.safe_dump(old, sort_keys=False)
    assert continues(old_text, cfg) == ["generation.batch_invariant"]
    added, differs = compare(old, {**tree, "generation": {**tree["generation"], "batch_invariant": True}},
                             defaults())
    assert added == [] and differs == ["generation.batch_invariant = True (a setting the committed config lacks, "
                                       "not at its default)"]
    elsewhere = {**old, "run": {**old["run"], "output_dir": "/elsewhere/runs"}, "store": {"root": "/elsewhere/s"}}
    assert continues(yaml.safe_dump(elsewhere), cfg) == ["generation.batch_invariant"]  # another machine's paths
    changed = {**old, "trainer": {**old["trainer"], "lr": old["trainer"]["lr"] * 2}}
    with pytest.raises(ConfigError, match=r"trainer\.lr: .* committed, .* here"):
        continues(yaml.safe_dump(changed), cfg)
    gone = {**old, "loop": {**old["loop"], "a_setting_since_removed": 1}}
    with pytest.raises(ConfigError, match="loop.a_setting_since_removed .in the committed config, gone"):
        continues(yaml.safe_dump(gone), cfg)

    # the committed experiment is found by its label, whatever its id digests now
    committed = tmp_path / "cpu-tiny-exp-0123abcd" / "shards" / "1-population"
    committed.mkdir(parents=True)
    (committed / "shard.json").write_text("{}")
    (committed / "config.yaml").write_text(old_text)
    assert default_id(cfg, "cpu-tiny", []) != "cpu-tiny-exp-0123abcd"
    assert continued_id(tmp_path, "cpu-tiny", cfg) == "cpu-tiny-exp-0123abcd"
    other = tmp_path / "cpu-tiny-exp-4567cdef" / "shards" / "2"
    other.mkdir(parents=True)
    (other / "shard.json").write_text("{}")
    (other / "config.yaml").write_text(yaml.safe_dump(changed))
    assert continued_id(tmp_path, "cpu-tiny", cfg) == "cpu-tiny-exp-0123abcd"  # another experiment is not it
    (other / "config.yaml").write_text(old_text)
    with pytest.raises(ConfigError, match="name one with --id"):
        continued_id(tmp_path, "cpu-tiny", cfg)
