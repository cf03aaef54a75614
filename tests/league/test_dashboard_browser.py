"""The dashboard in a real headless Chromium, on the database of a real short run (cpu-tiny, tests/e2e): what each
view renders equals what the REST API answers, the overview follows the run as it trains (no reload), and the
browser's console reports no error (text from models and clients staying text: test_dashboard_hostile.py).

Set POPULORA_DASHBOARD_SCREENSHOTS=docs/img to write a PNG of each view (how docs/img/dashboard-*.png are made).
"""

from __future__ import annotations

import json
import os
import threading
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from populora.ports import free_port
from services.league.db import LeagueDB
from services.league.rest import LeagueRestServer
from services.league.service import LeagueService
from tests.league.browser import Browser
from tests.league.conftest import serve_league

pytestmark = pytest.mark.slow
SHOTS = os.environ.get("POPULORA_DASHBOARD_SCREENSHOTS")
RUN = "e2e"


@pytest.fixture(scope="module")
def site(browser, short_run):
    server = serve_league(short_run.url)
    yield server
    server.stop()


def get(site: LeagueRestServer, path: str) -> dict:
    with urllib.request.urlopen(site.url.rstrip("/") + path, timeout=30) as resp:
        return json.load(resp)


def view(page: Browser, site: LeagueRestServer, route: str) -> None:
    page.open(f"{site.url}?poll=500#/{route}")


def shot(page: Browser, name: str) -> None:
    if SHOTS:
        page.screenshot(Path(SHOTS) / f"dashboard-{name}.png")


def _state(page: Browser) -> dict:
    """What the page shows and holds, for a failure's message."""
    return page.js("const m = document.querySelector('#main'); const l = document.querySelector('#live-text');"
                   "return {view: m && m.dataset.view, main: m && m.textContent.slice(0, 300),"
                   " live: l && l.textContent, polls: window.populora && window.populora.polls,"
                   " renders: window.populora && window.populora.renders, url: location.href}")


def close(text: str, value: float) -> bool:
    return abs(float(text) - value) <= 0.005 + 1e-9  # shown with 2 decimals


def test_overview_shows_where_the_run_stands(page, site):
    ov = get(site, f"/v1/runs/{RUN}/overview")
    view(page, site, f"overview/{RUN}")
    # the run is at step 2, or 3 once the live test below has trained its last step (the run is shared)
    page.wait(lambda: page.texts("#ov-step .card-value") == [f"{ov['latest_step']['step']} / 3"], what="the step card",
              describe=lambda: _state(page))
    assert page.texts("#ov-status .card-value") == ["finished"]
    assert page.texts("#ov-compute .card-sub")[0].endswith(
        f" · {ov['compute']['budget_flops']:.1e} FLOPs charged to the budget")
    latest, measured = ov["latest_step"], ov["last_measured_step"]
    assert page.texts("#ov-phases .bar-label") == list(latest["seconds"])
    assert page.texts("#ov-valid .card-sub") == [f"{measured['valid']} of {measured['proposals']} at step {measured['step']}"]
    assert page.texts("#ov-task-types tbody td:first-child") == sorted(measured["task_types"])
    events = page.texts("#ov-events li")
    assert len(events) == len(ov["evolution"]) >= 1
    for e in ov["evolution"]:
        assert any(e["child"] in li and e["operator"] in li for li in events)
    n_types = len(get(site, f"/v1/runs/{RUN}/steps")["steps"][-1]["task_types"])
    page.wait(lambda: page.js("return document.querySelector('#ov-steps-chart').dataset.series") == str(2 * n_types),
              what="the per-step chart: a solve and a valid line per task type")
    shot(page, "overview")


def test_dynamics_show_the_rest_dynamics_against_compute(page, site):
    d = get(site, f"/v1/runs/{RUN}/dynamics")
    assert d["steps"] == list(range(1, len(d["steps"]) + 1)) and len(d["steps"]) >= 2 and d["flops"][0] > 0
    view(page, site, f"dynamics/{RUN}")
    page.wait(lambda: page.js("return document.querySelector('#main').dataset.view") == f"dynamics/{RUN}",
              what="the dynamics view")
    last = d["coverage"][-1]
    assert page.texts("#dyn-shapes .card-value") == [str(last["distinct_shapes"])]
    assert page.texts("#dyn-node-types .card-value") == [str(last["node_types"])]
    assert page.texts("#dyn-flops .card-value") == [f"{d['flops'][-1]:.1e}"]
    students = sorted(d["solve_rate"])
    assert page.texts("#dyn-oscillation tbody td:first-child") == students
    for name, series in (("dyn-complexity", 3), ("dyn-coverage", 2), ("dyn-diversity", 3), ("dyn-solve", len(students))):
        assert page.js(f"return document.querySelector('#{name}').dataset.series") == str(series), name
    # the x axis is the compute: the coverage chart's x values are the FLOPs the REST API gives
    assert page.js("return window.populora.charts['dyn-coverage'].data[0]") == pytest.approx(d["flops"])
    shot(page, "dynamics")


def _rows(page: Browser) -> list[list[str]]:
    return page.js("return Array.from(document.querySelectorAll('#leaderboard tbody tr'))"
                   ".map(tr => Array.from(tr.cells).map(td => td.textContent))")


def test_leaderboard_rows_equal_the_rest_leaderboard(page, site):
    rest = get(site, f"/v1/runs/{RUN}/leaderboard")["rows"]
    view(page, site, f"leaderboard/{RUN}")
    page.wait(lambda: len(_rows(page)) == len(rest), what="every leaderboard row")

    def check(shown: list[list[str]], expected: list[dict]) -> None:
        assert [c[1] for c in shown] == [r["adapter_id"] for r in expected]
        for c, r in zip(shown, expected):
            assert c[0] == str(r["rank"]) and c[2] == r["role"] and c[3] == str(r["lora_rank"]) and c[4] == r["status"]
            assert close(c[5], r["mu"]) and close(c[6], r["sigma"]) and close(c[7], r["conservative_skill"])
            assert [int(x) for x in c[8:12]] == [r["wins"], r["losses"], r["draws"], r["matches"]]
            assert c[12] == (r["operator"] or "–") and c[13] == (", ".join(r["parents"]) or "–")

    check(_rows(page), rest)
    assert len({r["lora_rank"] for r in rest}) > 1  # the run's members hold several ranks (tests/league/conftest.py)
    shot(page, "leaderboard")
    # sortable: mu - k sigma descending is the rank order, ascending its reverse
    page.click("th[data-key='conservative_skill']")
    page.wait(lambda: "desc" in page.driver.find_element("css selector", "th[data-key='conservative_skill']")
              .get_attribute("class"), what="sorted descending")
    check(_rows(page), rest)
    page.click("th[data-key='conservative_skill']")
    page.wait(lambda: _rows(page)[0][1] == rest[-1]["adapter_id"], what="sorted ascending")
    check(_rows(page), sorted(rest, key=lambda r: (r["conservative_skill"], r["rank"])))
    # filters
    page.select("#filter-role", "student")
    students = [r for r in rest if r["role"] == "student"]
    page.wait(lambda: len(_rows(page)) == len(students), what="the role filter")
    assert sorted(c[1] for c in _rows(page)) == sorted(r["adapter_id"] for r in students)
    page.select("#filter-status", "retired")
    retired = [r for r in students if r["status"] == "retired"]
    page.wait(lambda: sorted(c[1] for c in _rows(page)) == sorted(r["adapter_id"] for r in retired),
              what="the status filter")
    page.select("#filter-role", "")
    page.select("#filter-status", "")


def test_leaderboard_shows_the_latest_held_out_scores(page, site, short_run):
    """Scores recorded in the league (as the eval phase records them) appear as a pass@1 column per benchmark, the
    latest version's score per adapter, and the bare base model's beside the table."""
    from populora.pb import league_pb2 as pb

    rest = get(site, f"/v1/runs/{RUN}/leaderboard")["rows"]
    db = LeagueDB(short_run.url)
    league = LeagueService(db)
    scores = [pb.EvalScore(adapter_id="", version=0, benchmark="heldout", step=0, label="base", n_problems=4,
                           samples=1, pass_at_1=0.25, pass_at_k={1: 0.25})]
    for i, r in enumerate(rest):
        for version, p1 in ((1, 0.0), (2, (i + 1) / 8)):  # the later version is the one shown
            scores.append(pb.EvalScore(adapter_id=r["adapter_id"], version=version, benchmark="heldout",
                                       step=version, label=f"{r['adapter_id']}@v{version}", n_problems=8, samples=1,
                                       pass_at_1=p1, pass_at_k={1: p1}))
    league.RecordEvals(pb.RecordEvalsRequest(run_id=RUN, scores=scores))
    league.close()
    # a server of its own, without a read cache: the shared one may hold this run's scores from before they were
    # written (by another process's league, which its cache cannot see)
    db = LeagueDB(short_run.url)
    fresh = LeagueRestServer(LeagueService(db, read_cache_s=0), port=free_port()).start()
    try:
        view(page, fresh, f"leaderboard/{RUN}")
        page.wait(lambda: len(_rows(page)) == len(rest) and "heldout pass@1" in page.js(
            "return document.querySelector('#leaderboard thead').textContent"), what="the eval column")
        shown = {c[1]: c[-1] for c in _rows(page)}
        base = page.js("return document.getElementById('eval-base').textContent")
    finally:
        page.open("about:blank")  # stop the page's polling before its server goes: a refused poll is a console error
        fresh.stop()
    assert shown == {r["adapter_id"]: f"{(i + 1) / 8:.3f}" for i, r in enumerate(rest)}
    assert base == "bare base model: heldout pass@1 0.250"


def test_rating_chart_has_a_line_per_adapter(page, site):
    rest = get(site, f"/v1/runs/{RUN}/ratings")
    view(page, site, f"ratings/{RUN}")
    page.wait(lambda: page.js("return window.populora.charts.ratings !== undefined"), what="the rating chart")
    labels = page.js("return window.populora.charts.ratings.series.slice(1).map(s => s.label)")
    assert sorted(labels) == sorted(a["adapter_id"] for a in rest["adapters"])
    assert len(labels) == len(get(site, f"/v1/runs/{RUN}/leaderboard")["rows"])
    data = page.js("return window.populora.charts.ratings.data")
    steps = data[0]
    for label, column in zip(labels, data[1:]):
        curve = next(a for a in rest["adapters"] if a["adapter_id"] == label)
        drawn = {s: v for s, v in zip(steps, column) if v is not None}
        assert drawn == pytest.approx(dict(zip(curve["steps"], curve["conservative_skill"]))), label
    legend = page.texts(".u-legend .u-series .u-label")
    assert sorted(x.rstrip(":").strip() for x in legend[1:]) == sorted(labels)
    assert len(page.texts("#rating-events li")) == len(rest["events"]) >= 1
    shot(page, "ratings")


def test_lineage_has_a_node_per_adapter_and_an_edge_per_parent_link(page, site):
    rest = get(site, f"/v1/runs/{RUN}/lineage")
    board = get(site, f"/v1/runs/{RUN}/leaderboard")["rows"]
    view(page, site, f"lineage/{RUN}")
    page.wait(lambda: page.js("return document.querySelectorAll('.lineage-node').length") == len(rest["nodes"]),
              what="every lineage node")
    nodes = page.js("return Array.from(document.querySelectorAll('.lineage-node')).map(g => g.dataset.adapter)")
    assert sorted(nodes) == sorted(r["adapter_id"] for r in board)  # every member and every retired member
    edges = page.js("return Array.from(document.querySelectorAll('.lineage-edge'))"
                    ".map(g => [g.dataset.parent, g.dataset.child])")
    links = sorted([p, r["adapter_id"]] for r in board for p in r["parents"])
    assert sorted(edges) == links == sorted([e["parent_id"], e["child_id"]] for e in rest["edges"]) and links
    retired = page.js("return document.querySelectorAll('.lineage-node.retired').length")
    assert retired == sum(r["status"] == "retired" for r in board) >= 1
    child = rest["edges"][0]["child_id"]
    page.click(f".lineage-node[data-adapter='{child}']")
    page.wait(lambda: page.texts("#lineage-detail h3") == [child], what="the node's history panel")
    page.wait(lambda: page.js("return window.populora.charts.lineageHistory !== undefined"), what="its history")
    assert child in page.texts(".lineage-node.selected .node-id")[0]
    assert rest["edges"][0]["parent_id"] in page.texts("#lineage-detail dd")[7]
    node = next(n for n in rest["nodes"] if n["adapter_id"] == child)
    assert page.texts("#lineage-rank") == [str(node["lora_rank"])]
    assert all(f"r {n['lora_rank']} ·" in t for n, t in zip(
        rest["nodes"], [page.js(f"return document.querySelector(\".lineage-node[data-adapter='{n['adapter_id']}'] "
                                f".node-sub\").textContent") for n in rest["nodes"]], strict=True))
    # each child's relative change from its parent, as the step that made it recorded it, on its edge and its panel
    made = {e["child"]: e["relative_change"] for st in get(site, f"/v1/runs/{RUN}/steps")["steps"]
            for e in st.get("evolution") or []}
    assert made and {e["child_id"]: e["relative_change"] for e in rest["edges"]} == made
    assert {n["adapter_id"]: n["relative_change"] for n in rest["nodes"] if n["operator"]} == made
    shown = page.texts("#lineage-detail dd")[9]
    if made[child] is None:  # a parent whose update is still zero has no relative change (cpu-tiny's first steps)
        assert shown == "–"
    else:
        assert f"Δ={made[child]:.2f}" in " ".join(page.texts(".lineage-edge .edge-label"))
        assert shown.startswith(f"{made[child]:.3f} from its first parent")
    shot(page, "lineage")


def test_payoff_heatmap_equals_the_rest_matrix(page, site):
    rest = get(site, f"/v1/runs/{RUN}/payoff")
    view(page, site, f"payoff/{RUN}")
    cells = len(rest["teachers"]) * len(rest["students"])
    page.wait(lambda: page.js("return document.querySelectorAll('td.heat').length") == cells, what="the heatmap")
    shown = page.js("return Array.from(document.querySelectorAll('td.heat'))"
                    ".map(td => [td.dataset.teacher, td.dataset.student, td.dataset.value])")
    for teacher, student, value in shown:
        expected = rest["solve_rate"][rest["teachers"].index(teacher)][rest["students"].index(student)]
        assert (value == "") if expected is None else (float(value) == expected), (teacher, student)
    assert any(v != "" for _, _, v in shown)
    shot(page, "payoff")


def test_adapter_page_shows_versions_path_matches_and_samples(page, site, short_run):
    teacher = f"{RUN}.T0"
    rest = get(site, f"/v1/adapters/{teacher}")
    view(page, site, f"adapter/{teacher}")
    page.wait(lambda: page.texts("#adapter-id") == [teacher], what="the adapter page")
    assert page.texts("#adapter-rank .card-value") == [str(rest["adapter"]["rank"])]
    page.wait(lambda: page.texts("#store-path") == [rest["store_path"]], what="the stored version's path")
    path = Path(rest["store_path"])
    assert path.name == f"v{rest['versions'][-1]['version']}" and (path / "adapter_model.safetensors").exists()
    assert page.texts("#versions tbody td:first-child") == [f"v{v['version']}" for v in rest["versions"]]
    assert len(rest["versions"]) >= 2  # trained at least once
    matches = get(site, f"/v1/runs/{RUN}/matches?adapter_id={teacher}&order=desc&limit=50")["matches"]
    page.wait(lambda: len(page.texts("#adapter-matches tbody tr")) == len(matches), what="its matches")
    samples = get(site, f"/v1/adapters/{teacher}/samples?limit=12")
    assert len(page.texts("#sample-proposals .sample")) == len(samples["proposals"]) >= 1
    badges = page.texts("#sample-proposals .sample header .badge.ok, #sample-proposals .sample header .badge.bad")
    assert badges == [p["reason"] if not p["valid"] else "valid" for p in samples["proposals"]]
    page.wait(lambda: page.js("return window.populora.charts.adapter !== undefined"), what="its rating chart")
    shot(page, "adapter")
    # a student: its answers with their outcomes
    student = next(a["student"] for a in short_run.state.get(RUN, 1, "solve")["attempts"])
    view(page, site, f"adapter/{urllib.parse.quote(student)}")
    page.wait(lambda: page.texts("#adapter-id") == [student], what="the student's page")
    answers = get(site, f"/v1/adapters/{student}/samples?limit=12")["answers"]
    page.wait(lambda: len(page.texts("#sample-answers .sample")) == len(answers) >= 1, what="its answers")
    assert page.texts("#sample-answers .sample header .badge:last-child") == [a["outcome"] for a in answers]


def test_problem_explorer_shows_the_valid_tasks_of_a_step(page, site):
    rest = get(site, f"/v1/runs/{RUN}/tasks")
    view(page, site, f"problems/{RUN}")
    page.wait(lambda: len(page.texts("#tasks .task")) == len(rest["tasks"]) >= 1, what="the tasks")
    assert page.texts("#tasks .task pre.program") == [t["program"] for t in rest["tasks"]]
    first = rest["tasks"][0]
    io = page.texts("#tasks .task:first-child table.io tbody td")
    assert io[0::2] == first["inputs"] and io[1::2] == first["outputs"]
    assert first["teacher_id"] in page.texts("#tasks .task:first-child .who")[0]
    shot(page, "problems")
    every = get(site, f"/v1/runs/{RUN}/tasks?include_invalid=true&step=1")
    page.select("#problem-step", "1")
    page.wait(lambda: page.js("return document.querySelector('#problem-step').value") == "1"
              and len(page.texts("#tasks .task")) == len(get(site, f"/v1/runs/{RUN}/tasks?step=1")["tasks"]),
              what="step 1")
    page.click("#problem-invalid")
    page.wait(lambda: len(page.texts("#tasks .task")) == len(every["tasks"]), what="step 1 with rejected proposals")
    assert page.texts("#tasks .task details pre.raw") == [t["text"] for t in every["tasks"]]


def test_overview_follows_the_run_as_it_trains(page, site, short_run, monkeypatch):
    """Step 3 of the same run trains while the page is open: the page shows it, phase by phase, without a reload.
    A cpu-tiny phase can end between two of the page's polls, so after each phase of step 3 is stored the training
    waits (at most 20 s) until the page shows another phase than it did: what is checked is that the page follows,
    not how fast the machine is."""
    from coordinator.run.runprogress import RunProgress
    from coordinator.train import run_training

    shown = threading.Condition()
    seen: set[str] = set()
    showing: list[list[str]] = [[]]  # what the page shows now
    stored = RunProgress.stored

    def stored_then_shown(self, step: int) -> None:
        with shown:
            before = showing[0]
        stored(self, step)
        if step == 3:
            with shown:
                shown.wait_for(lambda: showing[0] != before, timeout=20)

    monkeypatch.setattr(RunProgress, "stored", stored_then_shown)

    view(page, site, f"overview/{RUN}")
    page.wait(lambda: page.texts("#ov-step .card-value") == ["2 / 3"], what="the run at step 2")
    page.js("window.__same_page = true")
    short_run.state.set_status(RUN, "running")
    failure: list[BaseException] = []

    def train() -> None:
        try:
            cfg = short_run.cfg.model_copy(deep=True)
            cfg.run.steps = 3
            run_training(cfg, RUN, short_run.state)
        except BaseException as e:  # reported by the test below
            failure.append(e)

    trainer = threading.Thread(target=train, daemon=True)
    trainer.start()
    while trainer.is_alive():
        phase = page.texts("#ov-phase .card-value")
        if SHOTS and phase and phase[0] not in seen | {"–", "match"}:
            shot(page, "overview-live")  # the last phase seen running, for docs/dashboard.md
        with shown:
            seen.update(phase)
            showing[0] = phase
            shown.notify_all()
        trainer.join(0.2)
    assert not failure, failure
    page.wait(lambda: page.texts("#ov-step .card-value") == ["3 / 3"], timeout=30, what="step 3 on the page")
    page.wait(lambda: page.texts("#ov-status .card-value") == ["finished"], timeout=30, what="the run finished")
    assert page.js("return window.__same_page") is True  # the same page: updated in place, not reloaded
    assert len(seen - {"–"}) >= 2, seen  # phases in progress were shown while step 3 ran
    ov = get(site, f"/v1/runs/{RUN}/overview")
    assert page.texts("#ov-phases .bar-label") == list(ov["latest_step"]["seconds"])
    assert ov["latest_step"]["step"] == 3
