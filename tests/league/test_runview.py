"""What the dashboard shows of a run's steps: the summaries the coordinator records in the league (RecordStepSummary,
coordinator/stepsummary.py) from the step's own records, and the phase journal read by SQL for where the run stands
and what a step proposed and answered (services/league/runview.py). Every step here is stored as `populora train`
stores it: its typed records through the coordinator's journal, its summary through the league's RPC. Malformed
journal rows read as gaps, never errors; and on a real run the summaries equal the coordinator's own metrics."""

from __future__ import annotations

import json
import math

import pytest
import sqlalchemy as sa

from bench.league_dashboard import store_step
from coordinator.journal import Journal as CoordinatorJournal
from coordinator.journal import JournalDB
from coordinator.step import Prepared, StepRecord
from coordinator.stepmetrics import prepared_metrics
from coordinator.stepsummary import record_step_summary, step_summary
from populora import records as r
from populora.config import Config
from populora.pb import league_pb2 as pb
from populora.rpc import ServiceError, is_read_only
from populora.tasks import BufferSet, Triplet
from services.league.runview import Journal, adapter_versions, public_steps, version_path
from tests.league.conftest import make_service

CONFIG = "run:\n  steps: 4\n  mode: population\n  output_dir: /data/runs\nevolution:\n  every_k: 2\n" \
         "store:\n  root: '{output_dir}/store'\n"


def _step(step: int, evolved: r.Evolved | None = None) -> StepRecord:
    """One training step of teacher T0 and student S0: two code_o proposals (one valid), two answers."""
    m = f"r/{step}/T0/code_o"
    task = Triplet("code_o", "def f(a):\n    return a * 2", ["1", "2"], ["2", "4"], "doubles",
                   complexity={"ast_depth": 4, "cyclomatic": 1, "lines_of_code": 2})
    population = {"T0": r.Member("teacher", step + 1), "S0": r.Member("student", step + 1)}
    spent = {"T0": r.Usage(5, 105), "S0": r.Usage(8, 10)}
    return StepRecord(
        step, r.Matched([r.Pairing(m, "T0", "S0", "code_o", 1.0)]),
        r.Proposed([r.Proposal(f"{m}/p0", "code_o", "T0", m, step, "<answer>ok</answer>", [9] * 50, [1, 2, 3]),
                    r.Proposal(f"{m}/p1", "code_o", "T0", m, step, "rambling", [9] * 50, [1, 2])]),
        r.Validated({f"{m}/p0": r.Verdict(True, "ok", "", task),
                     f"{m}/p1": r.Verdict(False, "no_answer", "no <answer>")}, BufferSet(100)),
        r.Solved([r.Attempt(f"{m}/p0/a{k}", f"{m}/p0", "S0", m, f"answer {k}", [9], [5] * 4) for k in range(2)]),
        r.Checked({f"{m}/p0/a0": "correct", f"{m}/p0/a1": "wrong"}, {f"{m}/p0": 0.5}),
        r.Rated(1, 0, [m], {}), r.Updated(population, {"T0": r.UpdateStats(0.1, tokens=5),
                                                      "S0": r.UpdateStats(0.2, tokens=8)}),
        evolved, r.Accounted(spent, sum(spent.values(), r.Usage()) + r.Usage(sandbox_jobs=4)))


@pytest.fixture
def run(sqlite_url):
    """Run `r` with step 0 and step 1 stored: the coordinator's journal and the league in one database."""
    league = make_service(sqlite_url)
    league.CreateRun(pb.CreateRunRequest(run_id="r", mode="population", config_yaml=CONFIG))
    state = JournalDB(sqlite_url)
    state.create_run("r", "population", CONFIG)
    j = CoordinatorJournal(state, "r")
    population = {"T0": r.Member("teacher", 1), "S0": r.Member("student", 1)}
    prepared = Prepared(r.WarmStarted(), r.Initialized(population),
                        r.Seeded(BufferSet(4), 2, 7, {"ok": 2, "no_answer": 5}, {"code_o": 3}),
                        r.Accounted({}, r.Usage()))
    j.put(0, "init", prepared.initialized, seconds=1.0)
    j.put(0, "seed", prepared.seeded, seconds=2.0)
    row = prepared_metrics(prepared, j.seconds(0))
    record_step_summary(league, "r", step_summary(prepared, row, state.phase_rows("r", 0)))
    store_step(state, league, Config(), "r", _step(1), seconds=0.5)
    yield state, league, Journal(sa.create_engine(sqlite_url))
    state.close()
    league.close()


def test_step_summaries_are_the_coordinators_figures(run):
    state, league, _j = run
    summaries = league.db.step_summaries("r")
    assert [s["step"] for s in summaries] == [0, 1]
    assert [set(s) & {"population", "versions"} for s in public_steps(summaries)] == [set(), set()]
    seed, one = summaries
    assert seed["seed"] == {"sizes": {"code_o": 3}, "reasons": {"ok": 2, "no_answer": 5}, "rounds": 2,
                            "proposals": 7}
    assert seed["population"] == {"T0": 1, "S0": 1} and seed["phases"] == ["init", "seed"]
    assert (one["proposals"], one["valid"], one["valid_rate"], one["rejections"]) == (2, 1, 0.5, {"no_answer": 1})
    tt = one["task_types"]["code_o"]
    assert (tt["valid"], tt["valid_rate"], tt["solve_rate"], tt["ast_depth"], tt["lines_of_code"]) == \
        (1, 0.5, 0.5, 4, 2)
    assert one["outcomes"] == {"correct": 1, "wrong": 1} and one["matches"] == 1
    assert one["compute"] == {"generated_tokens": 13, "trained_tokens": 115, "sandbox_jobs": 4}
    assert one["seconds"]["solve"] == 0.5 and one["step_seconds"] == 4.0  # 8 phases of 0.5 s, account included
    assert one["population"] == {"T0": 2, "S0": 2}
    # a resumed step records its summary again: replaced, never doubled
    store_step(state, league, Config(), "r", _step(1), seconds=0.5)
    assert [s["step"] for s in league.db.step_summaries("r")] == [0, 1]


def test_a_step_summary_is_a_json_object_of_a_known_run_and_needs_the_token(run):
    _state, league, _j = run
    for bad in ("[1, 2]", "{not json", '{"solve_rate": NaN}', '{"solve_rate": 1e999}', "x" * 1_000_001):
        with pytest.raises(ServiceError, match="summary_json"):
            league.RecordStepSummary(pb.RecordStepSummaryRequest(run_id="r", step=2, summary_json=bad))
    with pytest.raises(ServiceError, match="does not exist"):
        league.RecordStepSummary(pb.RecordStepSummaryRequest(run_id="nope", step=1, summary_json="{}"))
    assert [s["step"] for s in league.db.step_summaries("r")] == [0, 1]
    # a write: the token interceptor guards it
    assert not is_read_only(league.CONTRACT.methods_by_name["RecordStepSummary"])


def test_progress_versions_tasks_and_samples(run):
    state, league, j = run
    ov = j.overview("r", league.db.step_summaries("r"))
    assert ov["status"] == "running" and ov["steps_planned"] == 4
    assert ov["progress"]["done"]["phase"] == "account" and ov["progress"]["in_progress"] == {"step": 2,
                                                                                             "phase": "match"}
    events = [r.EvolutionEvent(2, "teacher", "T0", "T9", ["T0"], "M1", math.nan, 1.0)]
    two = _step(2, r.Evolved({"T9": r.Member("teacher", 1), "S0": r.Member("student", 3)}, events))
    journal = CoordinatorJournal(state, "r")
    for phase, record in (("match", two.matched), ("propose", two.proposed), ("validate", two.validated),
                          ("solve", two.solved), ("check", two.checked), ("rate", two.rated),
                          ("update", two.updated)):
        journal.put(2, phase, record, seconds=0.5)
    # step 2 evolves (every_k = 2): after update comes evolve
    assert j.overview("r", league.db.step_summaries("r"))["progress"]["in_progress"] == {"step": 2,
                                                                                        "phase": "evolve"}
    store_step(state, league, Config(), "r", two)
    summaries = league.db.step_summaries("r")
    ov = j.overview("r", summaries)
    assert ov["progress"]["in_progress"] == {"step": 3, "phase": "match"}
    assert ov["evolution"] == [{"step": 2, "role": "teacher", "retired": "T0", "child": "T9", "parents": ["T0"],
                                "operator": "M1", "relative_change": None}]
    assert ov["compute"]["generated_tokens"] == 2 * 13
    state.set_status("r", "finished")
    assert j.overview("r", summaries)["progress"]["in_progress"] is None
    assert adapter_versions(summaries, "T0") == [{"version": 1, "step": 0}, {"version": 2, "step": 1},
                                                 {"version": 3, "step": 2}]
    assert adapter_versions(summaries, "S0")[-1] == {"version": 3, "step": 2}
    assert version_path(j.run("r").store_root(), "T0", 3) == "/data/runs/store/adapters/T0/v3"
    tasks = j.tasks("r", summaries, None, include_invalid=False)
    assert tasks["step"] == 2 and [t["id"] for t in tasks["tasks"]] == ["r/2/T0/code_o/p0"]
    t = tasks["tasks"][0]
    assert (t["teacher_id"], t["student_id"], t["rho"], t["outputs"]) == ("T0", "S0", 0.5, ["2", "4"])
    assert [s["step"] for s in tasks["steps"]] == [1, 2]
    assert len(j.tasks("r", summaries, 1, include_invalid=True)["tasks"]) == 2
    samples = j.samples("r", "T0", limit=3)
    assert [p["step"] for p in samples["proposals"]] == [2, 2, 1] and samples["answers"] == []
    assert samples["proposals"][1]["reason"] == "no_answer"
    answers = j.samples("r", "S0", limit=10)["answers"]
    assert [a["outcome"] for a in answers] == ["correct", "wrong"] * 2 and answers[0]["program"].startswith("def")


def test_token_ids_and_buffers_are_not_kept(run):
    _state, _league, j = run
    got = j.results("r", 1, ["propose", "validate"])
    assert "buffers" not in got["validate"]
    p = got["propose"]["proposals"][0]
    assert p["response_tokens"] == 3 and "prompt_token_ids" not in p and "response_token_ids" not in p


@pytest.mark.parametrize("bad", [[1, 2], "text", {"proposals": "x"}, {"proposals": [1, None, {"id": 3}]},
                                 {"verdicts": {"x": 5}}, {"outcomes": [], "rho": {"a": "high"}},
                                 {"pairings": [{"match_id": 3}]}])
def test_a_journal_of_another_layout_reads_as_gaps_never_errors(sqlite_url, bad):
    state = JournalDB(sqlite_url)
    state.create_run("r", "population", "not: [valid yaml")
    for phase in ("match", "propose", "validate", "solve", "check", "rate", "update", "evolve"):
        state.put("r", 1, phase, bad, seconds=0.1)
    with state.engine.begin() as c:
        c.execute(sa.text("INSERT INTO coord_phases VALUES ('r', 2, 'propose', '{not json', 1.0, 1, 0.0)"))
    j = Journal(sa.create_engine(sqlite_url))
    ov = j.overview("r", [])
    assert ov["progress"]["done"]["step"] == 2 and ov["steps_planned"] is None and ov["latest_step"] is None
    assert j.tasks("r", [], 1, True)["step"] == 1
    assert j.samples("r", "T0", 5) == {"adapter_id": "T0", "proposals": [], "answers": []}
    json.dumps(ov, allow_nan=False)
    state.close()


def test_a_failed_phase_is_reported(run):
    state, league, j = run
    state.put("r", 2, "match", {"pairings": []}, seconds=0.1)
    state.put("r", 2, "failed:propose", {"error": "inference: out of memory"}, seconds=0.0)
    state.set_status("r", "failed")
    ov = j.overview("r", league.db.step_summaries("r"))
    assert ov["error"] == {"step": 2, "phase": "propose", "error": "inference: out of memory"}
    assert ov["progress"]["done"]["phase"] == "match" and ov["progress"]["in_progress"] is None


def test_without_journal_tables(sqlite_url):
    j = Journal(sa.create_engine(sqlite_url))
    assert j.overview("r", []) is None and j.results("r", 1, ["propose"]) == {}


@pytest.mark.slow
def test_per_step_figures_equal_the_coordinators_own_metrics(short_run):
    """On the real cpu-tiny run: what the dashboard shows per step is what metrics.jsonl says."""
    from coordinator.stepmetrics import read_metrics
    from services.league.db import LeagueDB

    rows = {r["step"]: r for r in read_metrics(short_run.root / "runs" / short_run.run_id)}
    db = LeagueDB(short_run.url)
    steps = {s["step"]: s for s in db.step_summaries(short_run.run_id)}
    db.close()
    assert set(steps) == set(rows) and {0, 1, 2} <= set(steps)
    assert steps[0]["seed"]["sizes"] == rows[0]["seed_sizes"]
    for step in sorted(steps)[1:]:
        ours, theirs = steps[step], rows[step]
        assert ours["valid_rate"] == theirs["valid_rate"]
        assert ours["outcomes"] == theirs["outcomes"]
        assert ours["seconds"] == pytest.approx(theirs["seconds"])
        assert ours["compute"]["generated_tokens"] == sum(theirs["tokens"].values())
        assert ours["compute"] == {k: theirs["compute"][k] for k in ("generated_tokens", "trained_tokens",
                                                                       "sandbox_jobs")}
        assert ours["matches"] == theirs["matches_reported"]
        assert [e["child"] for e in ours["evolution"]] == [e["child"] for e in theirs.get("evolution", [])]
        for tt, m in theirs["task_types"].items():
            mine = ours["task_types"].get(tt, {})
            assert mine.get("valid_rate") == m["valid_rate"], (step, tt)
            assert mine.get("rejections", {}) == m["rejections"], (step, tt)
            assert mine.get("solve_rate") == pytest.approx(m["solve_rate"]) if m["solve_rate"] is not None \
                else mine.get("solve_rate") is None
