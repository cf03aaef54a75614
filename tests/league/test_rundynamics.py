"""The dashboard's dynamics of a run (GET /v1/runs/{run}/dynamics, services/league/runview.py): from the step
summaries and problems the coordinator records, the same numbers as the comparison's (coordinator/experiment/armdynamics.py,
from metrics.jsonl and the store), and a step recorded later read on the next call."""

from __future__ import annotations

import pytest

from bench.league_dashboard import store_step
from populora.config import Config
from services.league.runview import RunView
from tests.league.test_runview import _step, run  # noqa: F401  (the fixture: a run with steps 0 and 1 stored)


@pytest.mark.slow
def test_dynamics_equal_the_coordinators_own(short_run):
    """On the real cpu-tiny run: the dashboard's dynamics (from the step summaries and problems the league was
    sent) are the comparison's (coordinator.experiment.armdynamics, from metrics.jsonl and the store)."""
    from coordinator.experiment.armdynamics import arm_dynamics
    from coordinator.record.stepmetrics import read_metrics
    from services.league.db import LeagueDB

    rows = read_metrics(short_run.root / "runs" / short_run.run_id)
    db = LeagueDB(short_run.url)
    try:
        got = RunView(db).dynamics(short_run.run_id, db.step_summaries(short_run.run_id))
    finally:
        db.close()
    # the weight diversity the run recorded at each step against the one read from the store afterwards
    assert any("weight_diversity" in r for r in rows)
    unrecorded = [{k: v for k, v in r.items() if k != "weight_diversity"} for r in rows]
    want = arm_dynamics(unrecorded, short_run.cfg.store_root, weights=True)
    assert got["steps"] == want["steps"] and len(got["steps"]) >= 2
    assert got["flops"] == pytest.approx(want["flops"]) and got["flops"][-1] > 0
    for key in ("coverage", "behavioural_diversity", "complexity", "solve_rate", "oscillation"):
        assert got[key] == want[key], key
    assert sum(c["proposals"] for c in got["coverage"]) > 0
    assert [w["step"] for w in got["weight_diversity"]] == [w["step"] for w in want["weight_diversity"]] == \
        want["steps"]
    for a, b in zip(got["weight_diversity"], want["weight_diversity"], strict=True):
        for k in ("cosine", "distance"):  # None where every update is still zero (B = 0 before its first update)
            assert (a[k] is None) == (b[k] is None) and (a[k] is None or a[k] == pytest.approx(b[k])), (a, b)
    assert any(w["distance"] is not None for w in want["weight_diversity"])


def test_dynamics_of_the_recorded_steps(run):  # noqa: F811  (the fixture imported above)
    state, league, j = run
    d = j.dynamics("r", league.db.step_summaries("r"))
    assert d["steps"] == [1] and d["coverage"][0]["proposals"] == 1 and d["coverage"][0]["distinct_shapes"] == 1
    assert d["solve_rate"] == {"S0": [0.5]} and d["complexity"]["ast_depth"] == [4]
    assert d["weight_diversity"] == [] and d["behavioural_diversity"] == [None]  # one teacher
    # a step recorded later is read (and only it: the first step's programs are kept)
    store_step(state, league, Config(), "r", _step(2), seconds=0.5)
    again = j.dynamics("r", league.db.step_summaries("r"))
    assert again["steps"] == [1, 2] and [c["distinct_shapes"] for c in again["coverage"]] == [1, 1]
    assert again["oscillation"] == {"S0": None}  # two rates: no change is possible yet

