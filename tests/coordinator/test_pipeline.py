"""Overlapped steps (spec 16) without services: which versions play a step's games, the staleness bound, the order
the pipeline runs phases in, the timeline, and the records of lock-step runs left as they were."""

from __future__ import annotations

import threading
import time

import pytest

import coordinator.run.pipeline as pipeline
from coordinator.record.timeline import busy_seconds, timeline_metrics
from coordinator.run.phases import Run
from coordinator.run.phases.staleness import behaviour_logprobs, bound
from coordinator.run.step import behaviour_step
from populora.config import load_config
from populora.records import Attempt, Proposal, Rollout, Updated, UpdateStats, from_json, to_json


def _run(k: int, every_k: int = 1000, mode: str = "population") -> Run:
    cfg = load_config(overrides=[f"loop.max_staleness={k}", f"evolution.every_k={every_k}", f"run.mode={mode}"],
                      env=False)
    return Run("r", cfg, None, None)


def test_behaviour_step_lags_by_k_and_stops_at_evolution():
    assert [behaviour_step(_run(0), t) for t in range(1, 6)] == [0, 1, 2, 3, 4]  # lock-step
    assert [behaviour_step(_run(1), t) for t in range(1, 6)] == [0, 0, 1, 2, 3]
    assert [behaviour_step(_run(2), t) for t in range(1, 6)] == [0, 0, 0, 1, 2]
    # evolution every 2 steps is a barrier: step 3's games are played by what step 2's evolution left
    assert [behaviour_step(_run(1, every_k=2), t) for t in range(1, 7)] == [0, 0, 2, 2, 4, 4]
    assert [behaviour_step(_run(1, every_k=2, mode="baseline"), t) for t in range(1, 5)] == [0, 0, 1, 2]


def test_rollouts_beyond_the_bound_are_dropped_and_counted():
    def r(version, logprobs=()):
        return Rollout("student", "code_o", 1.0, [1], [2, 3], version, list(logprobs))

    got = bound([r(5), r(4), r(3), r(0)], version=5, k=1)
    assert [x.version for x in got.kept] == [5, 4, 0] and got.dropped == 1
    assert got.histogram == {"0": 2, "1": 1}
    assert behaviour_logprobs(r(4, [-0.1, -0.2]), k=1) == [-0.1, -0.2]
    assert behaviour_logprobs(r(4, [-0.1, -0.2]), k=0) == []  # lock-step: the on-policy update of spec 5
    assert behaviour_logprobs(r(4, [-0.1]), k=1) == []  # not one per token: not used


def test_overlap_fields_stay_out_of_lockstep_records():
    p = Proposal("m/p0", "code_o", "T0", "m", 1, "x", [1], [2])
    a = Attempt("a", "m/p0", "S0", "m", "y", [1], [2])
    assert "logprobs" not in to_json(p) and {"version", "logprobs"}.isdisjoint(to_json(a))
    u = Updated({}, {"T0": UpdateStats(loss=1.0)})
    assert set(to_json(u)) == {"population", "stats", "mode", "reused", "digests"}
    assert set(to_json(u)["stats"]["T0"]) == {"loss", "grad_norm", "mean_abs_advantage", "tokens", "seconds",
                                               "rollouts"}
    stale = Attempt("a", "m/p0", "S0", "m", "y", [1], [2], version=3, logprobs=[-0.5])
    assert to_json(stale)["version"] == 3 and from_json(Attempt, to_json(stale)) == stale
    assert from_json(Attempt, to_json(a)) == a


def test_the_truncated_share_is_stored_only_where_a_nucleus_truncated():
    """Spec 16: a run at top_p = 1 (or greedy) stores its records as before; a share > 0 is kept and read back."""
    whole = Attempt("a", "m/p0", "S0", "m", "y", [1], [2])
    cut = Attempt("a", "m/p0", "S0", "m", "y", [1], [2], truncated_fraction=0.75)
    assert "truncated_fraction" not in to_json(whole) and to_json(cut)["truncated_fraction"] == 0.75
    assert from_json(Attempt, to_json(cut)) == cut
    stats = UpdateStats(loss=1.0, truncated_fraction=0.5)
    assert "truncated_fraction" not in to_json(UpdateStats(loss=1.0)) and from_json(UpdateStats, to_json(stats)) == stats


def test_the_pipeline_plays_the_next_games_while_the_update_trains(monkeypatch):
    events, lock = [], threading.Lock()

    def note(what):
        with lock:
            events.append(what)

    def play(j, run, t):
        note(("play", t, "start"))
        time.sleep(0.05)
        note(("play", t, "end"))
        return t

    def finish(j, run, t, played):
        note(("update", t, "start"))
        time.sleep(0.15)
        note(("update", t, "end"))
        return type("Rec", (), {"step": t})()

    monkeypatch.setattr(pipeline, "prepare", lambda j, run: "step0")
    monkeypatch.setattr(pipeline, "play_step", play)
    monkeypatch.setattr(pipeline, "finish_step", finish)
    got = [r if r == "step0" else r.step for r in pipeline.step_records(None, _run(1), 4)]
    assert got == ["step0", 1, 2, 3, 4]  # in step order
    at = {e: i for i, e in enumerate(events)}
    assert at[("play", 2, "start")] < at[("update", 1, "end")]  # the overlap
    for t in (3, 4):  # never more than one update ahead: step t's games wait for update t-2
        assert at[("update", t - 2, "end")] < at[("play", t, "start")]
    updates = [e for e in events if e[0] == "update"]
    assert [e[1] for e in updates] == [1, 1, 2, 2, 3, 3, 4, 4]  # one update at a time, in order


def test_a_failed_update_stops_the_pipeline(monkeypatch):
    monkeypatch.setattr(pipeline, "prepare", lambda j, run: "step0")
    monkeypatch.setattr(pipeline, "play_step", lambda j, run, t: t)

    def finish(j, run, t, played):
        raise RuntimeError(f"update {t} failed")

    monkeypatch.setattr(pipeline, "finish_step", finish)
    with pytest.raises(RuntimeError, match="update 1 failed"):
        list(pipeline.step_records(None, _run(1), 5))


def _row(step, phase, start, end):
    return {"step": step, "phase": phase, "seconds": end - start, "finished_at": end}


def test_timeline_and_idle_fractions():
    assert busy_seconds([(0, 2), (1, 3), (5, 6)], 0, 10) == 4
    rows = [_row(1, "propose", 0, 3), _row(1, "solve", 3, 6), _row(1, "update", 6, 10), _row(1, "account", 10, 10),
            _row(2, "match", 6, 6.5), _row(2, "propose", 6.5, 9), _row(2, "solve", 9, 12), _row(2, "update", 12, 16),
            _row(2, "account", 16, 16)]
    got = timeline_metrics(2, rows)
    assert got["window_s"] == 6  # from step 1's end (10) to step 2's (16)
    assert [s["phase"] for s in got["timeline"]] == ["match", "propose", "solve", "update", "account"]
    assert got["timeline"][1]["service"] == "inference" and got["timeline"][3]["service"] == "trainer"
    assert got["idle_fraction"]["trainer"] == pytest.approx(2 / 6, abs=1e-4)  # 10-12 waiting for step 2's games
    assert got["idle_fraction"]["inference"] == pytest.approx(4 / 6, abs=1e-4)  # only 10-12
    first = timeline_metrics(1, rows)
    assert first["window_s"] == 10 and first["idle_fraction"]["trainer"] == pytest.approx(0.6)
    assert timeline_metrics(3, rows) == {}


def test_the_report_draws_the_timeline(tmp_path):
    from coordinator.record.report import plot_timeline

    rows = [_row(1, "propose", 0, 3), _row(1, "solve", 3, 6), _row(1, "update", 6, 10), _row(2, "propose", 6, 9),
            _row(2, "solve", 9, 12), _row(2, "update", 12, 16)]
    metrics = [{"step": 0}, {"step": 1, **timeline_metrics(1, rows)}, {"step": 2, **timeline_metrics(2, rows)}]
    assert plot_timeline(metrics, tmp_path / "timeline.png")
    assert (tmp_path / "timeline.png").stat().st_size > 1000
    assert not plot_timeline([{"step": 0}], tmp_path / "none.png")  # metrics written before timelines existed
