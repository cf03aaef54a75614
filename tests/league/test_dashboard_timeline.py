"""The overview's timeline in a real headless Chromium: each step's phases per service from the step summaries the
coordinator records (coordinator/record/stepsummary.py), and the trainer's and inference's idle fractions per step."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from coordinator.record.timeline import timeline_metrics
from populora.pb import league_pb2
from populora.ports import free_port
from services.league.db import LeagueDB
from services.league.rest import LeagueRestServer
from services.league.service import LeagueService
from tests.league.browser import Browser

pytestmark = pytest.mark.slow
RUN = "overlap"


def _row(step, phase, start, end):
    return {"step": step, "phase": phase, "seconds": end - start, "finished_at": 1000 + end}


ROWS = [_row(1, "match", 0, 0.5), _row(1, "propose", 0.5, 3), _row(1, "validate", 3, 3.5), _row(1, "solve", 3.5, 6),
        _row(1, "check", 6, 6.2), _row(1, "rate", 6.2, 6.4), _row(1, "update", 6.4, 10), _row(1, "account", 10, 10),
        _row(2, "match", 6.4, 6.6), _row(2, "propose", 6.6, 9), _row(2, "validate", 9, 9.4), _row(2, "solve", 9.4, 12),
        _row(2, "check", 12, 12.2), _row(2, "rate", 12.2, 12.4), _row(2, "update", 12.4, 16),
        _row(2, "account", 16, 16)]


def _summary(step: int) -> dict:
    own = [r for r in ROWS if r["step"] == step]
    seconds = {r["phase"]: r["seconds"] for r in own}
    out = {"step": step, "phases": list(seconds), "seconds": seconds, "step_seconds": sum(seconds.values()),
           "finished_at": max(r["finished_at"] for r in own), **timeline_metrics(step, ROWS)}
    out["staleness"] = {"histogram": {str(step - 1): 4}, "max": step - 1, "dropped": 0, "ratio_dev": 0.01,
                        "clipped_fraction": 0.0, "update_to_served_ms": 12.5}
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('tl') / 'league.sqlite'}"
    db = LeagueDB(url)
    db.migrate()
    service = LeagueService(db, read_cache_s=0.1)
    service.CreateRun(league_pb2.CreateRunRequest(run_id=RUN, config_yaml="", mode="population"))
    for step in (1, 2):
        service.RecordStepSummary(league_pb2.RecordStepSummaryRequest(run_id=RUN, step=step,
                                                                      summary_json=json.dumps(_summary(step))))
    server = LeagueRestServer(service, port=free_port()).start()
    yield server
    server.stop()


def test_the_overview_draws_each_steps_phases_per_service(site):
    page = Browser()
    try:
        page.open(f"{site.url}?poll=500#/overview/{RUN}")
        page.wait(lambda: page.texts("#ov-idle td"), what="the timeline's idle table")
        bars = page.js("return [...document.querySelectorAll('#ov-timeline .tl-bar')].map(b => "
                       "[b.dataset.step, b.dataset.phase, b.parentNode.previousSibling.textContent])")
        want = {(str(s["step"]), s["phase"], s["service"]) for r in (1, 2) for s in _summary(r)["timeline"]
                if s["service"] in ("inference", "sandbox", "league", "trainer", "evolver")}
        assert {tuple(b) for b in bars} == want
        # step 2's propose is drawn beside step 1's update: it starts left of where that update ends
        left = page.js("return [...document.querySelectorAll('#ov-timeline .tl-bar')].map(b => "
                       "[b.dataset.step + ':' + b.dataset.phase, parseFloat(b.style.left), parseFloat(b.style.width)])")
        pos = {k: (x, w) for k, x, w in left}
        assert pos["2:propose"][0] < pos["1:update"][0] + pos["1:update"][1]
        # step 1's window (0-10 s): trainer busy 6.4-10, inference all but 0-0.5 and 3-3.5 and 6-6.6 (step 2's
        # games count too); step 2's (10-16 s): trainer 12.4-16, inference 10-12
        assert page.texts("#ov-idle td") == ["1", "10.0 s", "64%", "20%", "0", "2", "6.0 s", "40%", "67%", "1"]
        if os.environ.get("POPULORA_DASHBOARD_SCREENSHOTS"):
            page.screenshot(Path(os.environ["POPULORA_DASHBOARD_SCREENSHOTS"]) / "dashboard-timeline.png")
        assert not page.console_errors()
    finally:
        page.close()
