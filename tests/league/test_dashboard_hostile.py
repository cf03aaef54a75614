"""The dashboard in a real headless Chromium on a league and a journal whose programs, model output, verdicts,
parameters and recorded evolution events are HTML and script: every view shows them as text, runs none of them and
loads scripts only from the dashboard itself. (Run and adapter ids cannot carry any: the league refuses an id outside
the rule of ids, tests/league/test_names_edges.py.)"""

from __future__ import annotations

import urllib.parse

import pytest

from services.league.db import LeagueDB
from services.league.service import LeagueService
from tests.league.conftest import serve_league

pytestmark = pytest.mark.slow

HOSTILE = ['"><img src=x onerror="window.__pwned=1">', "<script>window.__pwned=2</script>",
           "<b onmouseover=window.__pwned=3>bold</b> & &amp; ' \"", "<svg onload=window.__pwned=4>",
           "<iframe src=\"javascript:window.__pwned=5\"></iframe>"]


@pytest.fixture(scope="module")
def hostile_site(browser, tmp_path_factory):
    """A league and a journal whose programs, model output and recorded events are HTML and script."""
    from bench.league_dashboard import store_step
    from coordinator.run.journal import Journal, JournalDB
    from coordinator.run.runprogress import RunProgress
    from coordinator.run.step import StepRecord
    from populora import records as r
    from populora.config import Config
    from populora.pb import league_pb2 as pb
    from populora.tasks import BufferSet, Triplet

    url = f"sqlite:///{tmp_path_factory.mktemp('hostile') / 'league.sqlite'}"
    run, teacher, student, child = "hostile-run", "hostile-run.T0", "hostile-run.S0", "hostile-run.S1c0"
    db = LeagueDB(url)
    db.migrate()
    league = LeagueService(db)
    league.CreateRun(pb.CreateRunRequest(run_id=run, mode="population"))
    league.RegisterAdapters(pb.RegisterAdaptersRequest(run_id=run, adapters=[
        pb.AdapterSpec(adapter_id=teacher, role="teacher"), pb.AdapterSpec(adapter_id=student, role="student")]))
    league.ReportMatches(pb.ReportMatchesRequest(run_id=run, matches=[pb.MatchResult(
        match_id="m1", teacher_id=teacher, student_id=student, task_type="code_o", step=1, rhos=[0.5])]))
    league.RecordChild(pb.RecordChildRequest(run_id=run, child_id=child, role="student", parent_ids=[student],
                                              operator="M1", step=1, retire_id=student,
                                              params_json='{"epsilon": 0.1, "note": "<script>x</script>"}'))
    state = JournalDB(url)
    state.create_run(run, "population", "run: {steps: 2}\nstore: {root: '<b>store</b>'}\n")
    progress = RunProgress(league, state, run)
    progress.status("running")
    task = Triplet("code_o", f"def f(a):\n    return {HOSTILE[0]!r}", [repr(HOSTILE[1])], [repr(HOSTILE[3])],
                   HOSTILE[4], complexity={"ast_depth": 3})
    population = {teacher: r.Member("teacher", 1), student: r.Member("student", 1)}
    Journal(state, run, on_phase=progress.stored).once(0, "init", lambda: r.Initialized(population))
    step = StepRecord(
        r.Matched([r.Pairing("m1", teacher, student, "code_o")]),
        r.Proposed([r.Proposal("p0", "code_o", teacher, "m1", 1, HOSTILE[1] + HOSTILE[4], [], [1]),
                    r.Proposal("p1", "code_o", teacher, "m1", 1, HOSTILE[0], [], [1])]),
        r.Validated({"p0": r.Verdict(True, "ok", "", task), "p1": r.Verdict(False, HOSTILE[3], HOSTILE[2])},
                    BufferSet(4)),
        r.Solved([r.Attempt("p0/a0", "p0", student, "m1", HOSTILE[4] + HOSTILE[0], [], [1])]),
        r.Checked({"p0/a0": "correct"}, {"p0": 0.5}), r.Rated(1, 0, ["m1"], {}), 1, r.Updated(population, {}),
        r.Evolved({}, [r.EvolutionEvent(1, "student", student, HOSTILE[2], [student], "M1", 0.1, 0.0)]),
        r.Accounted({}, r.Usage()))
    store_step(state, league, Config(), run, step)
    state.close()
    server = serve_league(url)
    yield server, run, teacher, student, child
    server.stop()


def test_html_and_script_from_models_and_clients_are_shown_as_text(page, hostile_site):
    server, run, teacher, student, child = hostile_site
    q = urllib.parse.quote
    routes = [f"{v}/{q(run, safe='')}" for v in ("overview", "leaderboard", "ratings", "lineage", "payoff")]
    routes += [f"problems/{q(run, safe='')}", f"adapter/{q(teacher, safe='')}", f"adapter/{q(student, safe='')}"]
    for route in routes:
        page.open("about:blank")
        page.open(f"{server.url}#/{route}")
        shown = urllib.parse.unquote(route)
        page.wait(lambda shown=shown: page.js("return document.querySelector('#main').dataset.view") == shown,
                  what=route)
        assert not page.texts("#main .error-box"), route
        if route.startswith("problems"):
            page.click("#problem-invalid")
            page.wait(lambda: len(page.texts("#tasks .task")) == 2, what="both proposals")
            page.js("document.querySelectorAll('details').forEach(d => d.open = true)")
        text = page.js("return document.body.textContent")
        assert page.js("return window.__pwned") is None, route
        injected = page.js("return document.querySelectorAll('main img, main iframe, main script, main b, "
                           "main svg [onload], main [onerror], main [onmouseover]').length")
        assert injected == 0, route
        assert all(src.startswith(f"{server.url}static/") for src in
                   page.js("return Array.from(document.scripts).map(s => s.src)")), route
        expected = {"overview": [HOSTILE[2], student], "leaderboard": [teacher, student, child],
                    "lineage": [teacher, student], "payoff": [teacher, student],
                    "problems": [f"return {HOSTILE[0]!r}", HOSTILE[3], HOSTILE[4], HOSTILE[2], HOSTILE[0]],
                    "adapter": [HOSTILE[1] + HOSTILE[4]] if teacher in route or q(teacher, safe="") in route
                    else [HOSTILE[4] + HOSTILE[0]]}.get(route.split("/")[0], [])
        for s in expected:
            assert s in text, (route, s)
    assert run in page.texts("#run-select option")
