"""The overview's efficiency panel in a real headless Chromium: each phase of the latest step against the machine's
peak, from the `efficiency` the coordinator puts in a step's summary (coordinator/record/efficiency.py, stepsummary.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from populora.pb import league_pb2
from populora.ports import free_port
from services.league.db import LeagueDB
from services.league.rest import LeagueRestServer
from services.league.service import LeagueService
from tests.coordinator.test_efficiency import CEILINGS, _record
from tests.league.browser import Browser

pytestmark = pytest.mark.slow
RUN = "measured"


def _summary(step: int) -> dict:
    from coordinator.record.efficiency import efficiency

    seconds = {"propose": 2.0, "solve": 1.0, "update": 12.0 * step, "check": 1.0}
    out = {"step": step, "phases": list(seconds), "seconds": seconds, "step_seconds": sum(seconds.values()),
           "finished_at": 1000.0 + step}
    out.update(efficiency(_record(), {"seconds": seconds, "step_seconds": out["step_seconds"]}, CEILINGS))
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('eff') / 'league.sqlite'}"
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


def test_the_steps_carry_their_efficiency(site):
    import urllib.request

    with urllib.request.urlopen(f"{site.url}v1/runs/{RUN}/steps") as r:
        steps = json.loads(r.read())["steps"]
    assert [s["efficiency"]["phases"]["update"]["roofline_fraction"] for s in steps] == [1.0, 0.5]


def test_the_overview_shows_each_phase_against_the_peak(site):
    page = Browser()
    try:
        page.open(f"{site.url}?poll=500#/overview/{RUN}")
        page.wait(lambda: page.texts("#ov-efficiency-table td"), what="the efficiency table")
        cells = page.texts("#ov-efficiency-table td")
        rows = [cells[i:i + 7] for i in range(0, len(cells), 7)]
        # step 2, the latest: the update took 24 s of the 12 the roofline allows it, on one thread
        assert [r[0] for r in rows] == ["propose", "solve", "update", "step"]
        assert rows[2][:3] == ["update", "1", "24.0 s"] and rows[2][3] == "12.0 s" and rows[2][6] == "50%"
        propose = _summary(2)["efficiency"]["phases"]["propose"]["roofline_fraction"]  # the least time over 2 s
        assert rows[0][6] == f"{100 * propose:.0f}%" and rows[0][6] != "100%"
        widths = page.js("return [...document.querySelectorAll('#ov-efficiency .bar-fill')].map(b => b.style.width)")
        assert widths[2] == "50%"
        if os.environ.get("POPULORA_DASHBOARD_SCREENSHOTS"):
            page.screenshot(Path(os.environ["POPULORA_DASHBOARD_SCREENSHOTS"]) / "dashboard-efficiency.png")
        assert not page.console_errors()
    finally:
        page.close()
