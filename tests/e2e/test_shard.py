"""`populora experiment --shard`: a tiny shard (the echo model, one arm, one step, a few problems) run twice from
nothing gives the same weights digests and per-problem outcomes, pass@1 and likelihood alike; run again where its
working directory survives, it continues (nothing is trained again) and exports the same shard; the result is
computed from the committed shard files alone, and again by the check that imports nothing of the project, which
agrees with it."""

from __future__ import annotations

import json
import math
import shutil

from coordinator.cli import main as cli_main
from coordinator.experiment.recompute import main as recompute
from coordinator.experiment.shardresult import combine
from coordinator.experiment.shards import outcomes
from tests.e2e.conftest import e2e_overrides


def _shard(results, work, echo_model) -> tuple[dict, dict]:
    sets = e2e_overrides(work, echo_model) + ["run.steps=1", "eval.benchmarks=[]", "eval.checkpoints=[1.0]",
                                              "eval.pass_problems=3", "eval.likelihood_problems=5",
                                              "eval.max_new_tokens=16"]
    argv = ["experiment", "--preset", "cpu-tiny", "--budget", "flops=2e12", "--shard", "3:baseline", "--id", "tiny",
            "--limit", "8", "--results", str(results)]
    for s in sets:
        argv += ["--set", s]
    assert cli_main(argv) == 0
    shard = results / "tiny" / "shards" / "3-baseline"
    return (json.loads((shard / "shard.json").read_text()),
            {f"{p.stem}.{b}.json": body for p in sorted((shard / "evals").iterdir())
             for b, body in json.loads(p.read_text())["benchmarks"].items()})


def test_a_shard_run_twice_gives_the_same_digests_and_outcomes(tmp_path, echo_model, heldout_overlap):
    results = tmp_path / "results"
    # the held-out overlap the session made once (tests/e2e/conftest.py), where the first shard keeps its experiment's
    # files: it finds it there, as a continued shard does, and exports it with the shard for the second to take
    kept = tmp_path / "one" / "runs" / "tiny" / "shards" / "3-baseline"
    kept.mkdir(parents=True)
    shutil.copyfile(heldout_overlap, kept / heldout_overlap.name)
    first, first_evals = _shard(results, tmp_path / "one", echo_model)
    assert (results / "tiny" / heldout_overlap.name).read_bytes() == heldout_overlap.read_bytes()
    sets = json.loads((results / "tiny" / "problems.json").read_text())["benchmarks"]["heldout"]
    assert len(sets["pass"]) == 3 and len(sets["likelihood"]) == 5 and sets["of"] == 8
    # a second machine stretch with nothing of the first (run directory, store, journal): the shard starts again
    second, second_evals = _shard(results, tmp_path / "two", echo_model)
    assert first["weights"] == second["weights"]
    assert first["weights"]["tiny-baseline-s3"] and all(len(d) == 64 for d in first["weights"]["tiny-baseline-s3"].values())
    assert first["outcomes"] == second["outcomes"]
    assert outcomes(first_evals) == outcomes(second_evals)
    scored = outcomes(first_evals)
    assert set(scored) == {"tiny-baseline-s3.heldout.json", "tiny-baseline-s3.heldout-logprob.json"}
    likely = scored["tiny-baseline-s3.heldout-logprob.json"]
    assert [len(v) for v in likely.values()] == [5] and all(math.isfinite(x) and x < 0 for v in likely.values()
                                                             for x in v.values())
    assert [len(v) for v in scored["tiny-baseline-s3.heldout.json"].values()] == [3]
    assert second["commit"] == first["commit"] and second["machine"] == first["machine"]
    assert set(second["seconds"]["training"]) == {"baseline"} and second["seconds"]["calls"] == 1

    # again where the working directory survives: continued, nothing trained or scored again, the same shard
    again, _ = _shard(results, tmp_path / "two", echo_model)
    assert again["weights"] == second["weights"] and again["outcomes"] == second["outcomes"]
    assert again["seconds"]["calls"] == 2 and again["steps"] == second["steps"] == {"tiny-baseline-s3": 1}

    shard = results / "tiny" / "shards" / "3-baseline"
    rows = [json.loads(x) for x in (shard / "metrics" / "tiny-baseline-s3.metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1] and not any("timeline" in r for r in rows)
    assert not list(shard.rglob("*.safetensors"))
    # the result, from the shard files alone: one shard, no seed with both arms yet
    scores = combine(results / "tiny")
    assert scores["shards"]["count"] == 1 and scores["shards"]["complete_seeds"] == []
    readme = (results / "tiny" / "README.md").read_text()
    assert "Computed from 1 shard (3-baseline)" in readme and "No seed has both arms yet" in readme
    assert max(len(line) for line in readme.splitlines() if not line.startswith("|")) <= 120
    assert recompute([str(results / "tiny")]) == 0  # every number of scores.json and README.md, from the files alone
