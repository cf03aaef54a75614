"""End-to-end, embedded, overlapped steps (loop.max_staleness=1, spec 16): the games of a step run while the
previous update trains, with the versions one update behind; evolution is a barrier; a run killed with SIGKILL
while two steps are in flight resumes to the records of a run that was never killed."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from coordinator.run.journal import JournalDB
from coordinator.train import run_training
from populora.config import load_config
from tests.e2e.conftest import e2e_overrides
from tests.e2e.faults import span
from tests.e2e.records import differences, reference_records, run_records

RUN = "ov"
STEPS = 3  # cpu-tiny evolves at step 2 (every_k=2): step 3's games wait for it
OVERLAP = ("loop.max_staleness=1",)  # the run's shape beside e2e_overrides, as tests/e2e/records.py makes it
SCRIPT = textwrap.dedent("""
    import sys
    from coordinator.run.journal import JournalDB
    from coordinator.train import run_training
    from populora.config import load_config
    cfg = load_config(preset="cpu-tiny", overrides=sys.argv[2:], env=False)
    db = JournalDB(cfg.league_db_url)
    db.create_run(sys.argv[1], cfg.run.mode, cfg.to_yaml())
    run_training(cfg, sys.argv[1], db)
""")


def _overrides(tmp_path, echo_model):
    return e2e_overrides(tmp_path, echo_model) + [*OVERLAP, f"run.steps={STEPS}"]


def overlap_reference(echo_model, run=None) -> dict:
    """The records of the seeded embedded overlapped run (this file's, run id "ov", three steps): made once per
    model and source tree, by whichever test gets there first (`run`: records of such a run it made already)."""
    make = (lambda _work: run) if run is not None else None
    return reference_records(echo_model, make, run_id=RUN, steps=STEPS, extra=OVERLAP)


def _without(value, keys=("served_ms", "reused", "duplicates")):
    """Records compared across a kill, without what only says how the phases were delivered: a clock (served_ms),
    the versions a killed update had already written (reused: recognised instead of trained again) and the matches a
    killed rate phase had already reported (duplicates: the league applied each once either way)."""
    if isinstance(value, dict):
        return {k: _without(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [_without(v, keys) for v in value]
    return value


@pytest.mark.reference  # its first run is the overlapped reference (overlap_reference)
def test_overlapped_run_and_a_kill_during_the_overlap(tmp_path, echo_model):
    cfg = load_config(preset="cpu-tiny", overrides=_overrides(tmp_path / "a", echo_model), env=False)
    state = JournalDB(cfg.league_db_url)
    state.create_run(RUN, cfg.run.mode, cfg.to_yaml())
    run_dir = run_training(cfg, RUN, state)

    # versions: step 1 and 2 are played by the members as created; step 3 (after evolution) by the evolved ones
    init = state.get(RUN, 0, "init")["population"]
    for step in (1, 2):
        for p in state.get(RUN, step, "propose")["proposals"]:
            assert p["version"] == init[p["teacher"]]["version"] and p["logprobs"], (step, p["id"])
        for a in state.get(RUN, step, "solve")["attempts"]:
            assert a["version"] == init[a["student"]]["version"]
            assert len(a["logprobs"]) == len(a["response_token_ids"])
    evolved = state.get(RUN, 2, "evolve")["population"]
    assert {p["teacher"] for p in state.get(RUN, 3, "propose")["proposals"]} <= set(evolved)
    assert all(p["version"] == evolved[p["teacher"]]["version"] for p in state.get(RUN, 3, "propose")["proposals"])
    # staleness: 0 at step 1, 1 at step 2 (trained from step 1's versions), 0 after the evolution barrier
    stale = {s: {k for st in state.get(RUN, s, "update")["stats"].values() for k in st.get("staleness", {})}
             for s in (1, 2, 3)}
    assert stale == {1: {"0"}, 2: {"1"}, 3: {"0"}}, stale
    # the overlap happened: step 2's games started before step 1's update ended; step 3's waited for evolution
    assert span(state, RUN, 2, "match")[0] < span(state, RUN, 1, "update")[1]
    assert span(state, RUN, 3, "match")[0] >= span(state, RUN, 2, "evolve")[1]
    # ratings in step order, each match once
    rated = [r["step"] for r in state.phase_rows(RUN) if r["phase"] == "rate"]
    assert rated == [1, 2, 3]
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert rows[2]["staleness"]["max"] == 1 and rows[2]["staleness"]["update_to_served_ms"] > 0
    assert {s["phase"] for s in rows[2]["timeline"]} >= {"match", "propose", "solve", "update"}
    assert set(rows[2]["idle_fraction"]) == {"trainer", "inference"}
    expected = run_records(state, cfg.league_db_url, RUN)
    diff = differences(overlap_reference(echo_model, expected), expected)
    assert not diff, "the overlapped run's records are not the reference's:\n" + "\n".join(diff)

    # the same run, killed (SIGKILL) while step 2's games run beside step 1's update, then resumed
    over = _overrides(tmp_path / "b", echo_model)
    cfg_b = load_config(preset="cpu-tiny", overrides=over, env=False)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, RUN, *over], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    state_b = JournalDB(cfg_b.league_db_url)
    deadline, in_flight = time.monotonic() + 600, False
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            done = {(r["step"], r["phase"]) for r in state_b.phase_rows(RUN)}
            if (2, "match") in done:  # step 2's games have begun while step 1's update trains (seconds)
                in_flight = (1, "update") not in done
                break
            time.sleep(0.01)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.time()
        proc.wait()
    # the kill hit two steps in flight: step 2's games had begun and step 1's update had not been stored
    assert in_flight, "step 1's update ended before step 2's games were seen: the kill missed the overlap"
    assert (3, "account") not in {(r["step"], r["phase"]) for r in state_b.phase_rows(RUN)}
    run_training(cfg_b, RUN, state_b)
    assert span(state_b, RUN, 1, "update")[1] > killed  # step 1's update was made after the kill, by the resume
    got = run_records(state_b, cfg_b.league_db_url, RUN)
    diff = differences(_without(expected), _without(got))
    assert not diff, "killed with two steps in flight, the resumed run's records differ:\n" + "\n".join(diff)
