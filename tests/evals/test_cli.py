"""`populora eval` end to end on the tiny model: the JSON it writes, the scores it records in a run's league, and
bad input (unknown benchmark, missing file, missing adapter, another base model) refused with a non-zero exit and
nothing written."""

from __future__ import annotations

import json

import pytest

from coordinator.cli import main
from populora.config import load_config
from populora.pb import league_pb2 as pb
from populora.store import ArtifactStore
from tests.evals.conftest import save_adapter

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def run_dir(tmp_path):
    return tmp_path / "runs"


def _cli(run_dir, *args):
    return main(["eval", "--preset", "cpu-tiny", "--set", f"run.output_dir={run_dir}", "--max-new-tokens", "6",
                 *args])


@pytest.mark.slow
def test_adapters_and_base_to_json(tmp_path, run_dir, tiny, capsys):
    store = ArtifactStore(tmp_path / "store")
    refs = [save_adapter(store, tiny.model, f"x.A{i}", seed=i) for i in range(2)]
    out = tmp_path / "scores.json"
    dirs = [str(store.path_of(refs[0])), str(store.adapter_dir("x.A1"))]  # a version, and an adapter (latest)
    assert _cli(run_dir, "--adapters", *dirs, "--base", "--benchmark", "humaneval", "--limit", "2",
                "--out", str(out)) == 0
    body = json.loads(out.read_text())
    assert (body["benchmark"], body["limit"], body["samples"]) == ("humaneval", 2, 1)
    assert [(r["label"], r["adapter_id"], r["version"]) for r in body["results"]] == [
        ("base", None, 0), ("x.A0@v1", "x.A0", 1), ("x.A1@v1", "x.A1", 1)]
    assert all(len(r["problems"]) == 2 and "1" in r["pass_at_k"] for r in body["results"])
    table = capsys.readouterr().out
    assert "pass@1" in table and "x.A1@v1" in table


@pytest.mark.slow
def test_a_run_is_evaluated_and_recorded_in_its_league(run_dir, tiny):
    from services.league.service import LeagueService

    cfg = load_config(preset="cpu-tiny", overrides=[f"run.output_dir={run_dir}"], env=False)
    league = LeagueService.from_config(cfg)
    league.CreateRun(pb.CreateRunRequest(run_id="r1", mode="population"))
    league.RegisterAdapters(pb.RegisterAdaptersRequest(run_id="r1", adapters=[
        pb.AdapterSpec(adapter_id="r1.T0", role="teacher"), pb.AdapterSpec(adapter_id="r1.S0", role="student")]))
    store = ArtifactStore(cfg.store_root)
    save_adapter(store, tiny.model, "r1.T0", seed=1)
    save_adapter(store, tiny.model, "r1.S0", seed=2)
    save_adapter(store, tiny.model, "r1.S0", seed=3)  # v2: the latest is evaluated
    (run_dir / "r1").mkdir()
    assert _cli(run_dir, "--run", "r1", "--base", "--benchmark", "heldout", "--limit", "3") == 0
    got = league.GetEvals(pb.GetEvalsRequest(run_id="r1", include_problems=True)).scores
    assert sorted((s.adapter_id, s.version, s.benchmark, s.n_problems) for s in got) == [
        ("", 0, "heldout", 3), ("r1.S0", 2, "heldout", 3), ("r1.T0", 1, "heldout", 3)]
    assert {s.adapter_id: s.step for s in got} == {"": 0, "r1.S0": 3, "r1.T0": 1}  # the versions' meta steps
    lines = (run_dir / "r1" / "evals.jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["label"] == "base"
    league.close()


@pytest.mark.parametrize("args,words", [
    (["--base", "--benchmark", "nope"], "unknown benchmark 'nope'"),
    (["--base", "--benchmark", "jsonl"], "--data"),
    (["--base", "--benchmark", "mbpp-plus", "--data", "/nonexistent.jsonl"], "does not exist"),
    (["--adapters", "/nonexistent/adapters/a/v1"], "does not exist"),
    (["--base", "--samples", "3"], "--temperature > 0"),
    ([], "--run RUN or --adapters"),
    (["--run", "nope"], "no run database"),
    (["--check-references", "--base", "--benchmark", "humaneval"], "leave out --run, --adapters and --base"),
])
def test_bad_input_exits_non_zero_and_writes_nothing(tmp_path, run_dir, args, words, capsys):
    out = tmp_path / "scores.json"
    assert _cli(run_dir, *args, "--out", str(out)) == 2
    assert words in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_an_adapter_of_another_base_model_is_refused(tmp_path, run_dir, tiny, capsys):
    store = ArtifactStore(tmp_path / "store")
    ref = save_adapter(store, tiny.model, "x.A0", seed=0, base_model="smollm2-135m")
    out = tmp_path / "scores.json"
    assert _cli(run_dir, "--adapters", str(store.path_of(ref)), "--benchmark", "humaneval", "--limit", "1",
                "--out", str(out)) == 2
    assert "trained on base model 'smollm2-135m'" in capsys.readouterr().err
    assert not out.exists()
