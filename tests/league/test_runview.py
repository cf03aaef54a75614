"""What the dashboard shows of a run: what the coordinator records in the league from its own records and journal
(the run and its phases: RecordRun and RecordPhases, coordinator/run/runprogress.py; each step's summary and problems:
RecordStepSummary and RecordStepProblems) and the views over them (services/league/runview.py). Every step here is
stored as `populora train` stores it: its typed records through the coordinator's journal, then its phases, problems
and summary through the league's RPCs. Recording again replaces, never duplicates; problems of another layout read
as gaps, never errors; and on a real run the summaries equal the coordinator's own metrics."""

from __future__ import annotations

import json
import math
import re

import pytest
import sqlalchemy as sa

from bench.league_dashboard import store_step
from coordinator.record.stepmetrics import prepared_metrics
from coordinator.record.stepsummary import record_step_summary, step_summary
from coordinator.run.journal import Journal as CoordinatorJournal
from coordinator.run.journal import JournalDB
from coordinator.run.runprogress import RunProgress
from coordinator.run.step import Prepared, StepRecord
from populora import records as r
from populora.config import Config
from populora.pb import league_pb2 as pb
from populora.rpc import ServiceError, is_read_only
from populora.tasks import BufferSet, Triplet
from services.league.engine import PhaseRow
from services.league.runview import RunView, adapter_versions, public_steps, version_path
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
        r.Matched([r.Pairing(m, "T0", "S0", "code_o", 1.0)]),
        r.Proposed([r.Proposal(f"{m}/p0", "code_o", "T0", m, step, "<answer>ok</answer>", [9] * 50, [1, 2, 3]),
                    r.Proposal(f"{m}/p1", "code_o", "T0", m, step, "rambling", [9] * 50, [1, 2])]),
        r.Validated({f"{m}/p0": r.Verdict(True, "ok", "", task),
                     f"{m}/p1": r.Verdict(False, "no_answer", "no <answer>")}, BufferSet(100)),
        r.Solved([r.Attempt(f"{m}/p0/a{k}", f"{m}/p0", "S0", m, f"answer {k}", [9], [5] * 4) for k in range(2)]),
        r.Checked({f"{m}/p0/a0": "correct", f"{m}/p0/a1": "wrong"}, {f"{m}/p0": 0.5}),
        r.Rated(1, 0, [m], {}), step, r.Updated(population, {"T0": r.UpdateStats(0.1, tokens=5),
                                                      "S0": r.UpdateStats(0.2, tokens=8)}),
        evolved, r.Accounted(spent, sum(spent.values(), r.Usage()) + r.Usage(sandbox_jobs=4)))


@pytest.fixture
def run(sqlite_url):
    """Run `r` with step 0 and step 1 stored: the coordinator's journal and the league in one database."""
    league = make_service(sqlite_url)
    league.CreateRun(pb.CreateRunRequest(run_id="r", mode="population", config_yaml=CONFIG))
    state = JournalDB(sqlite_url)
    state.create_run("r", "population", CONFIG)
    progress = RunProgress(league, state, "r")
    progress.status("running")
    j = CoordinatorJournal(state, "r")
    population = {"T0": r.Member("teacher", 1), "S0": r.Member("student", 1)}
    prepared = Prepared(r.WarmStarted(), r.Initialized(population),
                        r.Seeded(BufferSet(4), 2, 7, {"ok": 2, "no_answer": 5}, {"code_o": 3}),
                        r.Accounted({}, r.Usage()))
    j.put(0, "init", prepared.initialized, seconds=1.0)
    j.put(0, "seed", prepared.seeded, seconds=2.0)
    row = prepared_metrics(prepared, j.seconds(0))
    progress.step(0)
    record_step_summary(league, "r", step_summary(prepared, row, state.phase_rows("r", 0)))
    store_step(state, league, Config(), "r", _step(1), seconds=0.5)
    yield state, league, RunView(league.db)
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
    assert one["compute"] == {"generated_tokens": 13, "trained_tokens": 115, "sandbox_jobs": 4, "flops": 0,
                              "budget_flops": 0}
    assert one["dynamics"] == {"solve_rates": {"S0": 0.5}, "complexity": {"ast_depth": 4, "cyclomatic": 1,
                                                                          "lines_of_code": 2},
                               "weight_diversity": None}
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
    assert ov["status"] == "running" and ov["steps_planned"] == 4 and ov["journal_rows"] == 10
    assert ov["progress"]["done"]["phase"] == "account" and ov["progress"]["in_progress"] == {"step": 2,
                                                                                             "phase": "match"}
    events = [r.EvolutionEvent(2, "teacher", "T0", "T9", ["T0"], "M1", math.nan, 1.0)]
    two = _step(2, r.Evolved({"T9": r.Member("teacher", 1), "S0": r.Member("student", 3)}, events))
    # each phase goes to the league as soon as the journal has stored it, as in `populora train`
    progress = RunProgress(league, state, "r")
    journal = CoordinatorJournal(state, "r", on_phase=progress.stored)
    for phase, record in (("match", two.matched), ("propose", two.proposed), ("validate", two.validated),
                          ("solve", two.solved), ("check", two.checked), ("rate", two.rated),
                          ("update", two.updated)):
        journal.once(2, phase, lambda record=record: record)
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
    progress.status("finished")
    assert j.overview("r", summaries)["progress"]["in_progress"] is None
    assert adapter_versions(summaries, "T0") == [{"version": 1, "step": 0}, {"version": 2, "step": 1},
                                                 {"version": 3, "step": 2}]
    assert adapter_versions(summaries, "S0")[-1] == {"version": 3, "step": 2}
    assert version_path(j.run("r").store_root(), "T0", 3) == "/data/runs/store/adapters/T0/v3"
    tasks = j.tasks("r", summaries, None, include_invalid=False)
    assert tasks["step"] == 2 and [t["id"] for t in tasks["tasks"]] == ["r/2/T0/code_o/p0"]
    t = tasks["tasks"][0]
    assert (t["teacher_id"], t["student_id"], t["rho"], t["outputs"]) == ("T0", "S0", 0.5, ["2", "4"])
    assert t["complexity"] == {"ast_depth": 4.0, "cyclomatic": 1.0, "lines_of_code": 2.0} and t["version"] == 2
    assert [s["step"] for s in tasks["steps"]] == [1, 2]
    assert len(j.tasks("r", summaries, 1, include_invalid=True)["tasks"]) == 2
    samples = j.samples("r", "T0", limit=3)
    assert [p["step"] for p in samples["proposals"]] == [2, 2, 1] and samples["answers"] == []
    assert samples["proposals"][1]["reason"] == "no_answer"
    answers = j.samples("r", "S0", limit=10)["answers"]
    assert [a["outcome"] for a in answers] == ["correct", "wrong"] * 2 and answers[0]["program"].startswith("def")
    assert answers[0]["task_type"] == "code_o" and answers[0]["inputs"] == ["1", "2"]


def test_token_ids_prompts_and_buffers_stay_in_the_journal(run):
    _state, league, _j = run
    (_, text), = league.db.step_problems("r", [1]).values()
    problems = json.loads(text)
    assert set(problems) == {"tasks", "answers"} and "token" not in text and "buffers" not in text
    assert problems["tasks"][0]["text"] == "<answer>ok</answer>"


def test_recording_again_replaces_never_duplicates(run):
    """A resumed run (or a retried call) sends the run, its phases and its steps' problems again: one of each."""
    state, league, j = run
    rows, problems = league.db.phase_rows("r"), league.db.step_problems("r", [1])
    progress = RunProgress(league, state, "r")
    for _ in range(2):
        progress.step(0)
        progress.step(1)
        store_step(state, league, Config(), "r", _step(1), seconds=0.5)  # the journal keeps the first results
        progress.status("running")
    assert league.db.phase_rows("r") == rows
    assert [s for s, _ in league.db.problem_steps("r")] == [1]
    assert league.db.step_problems("r", [1])[1][1] == problems[1][1]
    assert not league.RecordRun(pb.RecordRunRequest(run_id="r", mode="population", config_yaml=CONFIG,
                                                    status="stopped")).created
    assert j.run("r").status == "stopped" and j.run("r").created_at <= j.run("r").updated_at
    assert league.RecordStepProblems(pb.RecordStepProblemsRequest(run_id="r", step=1, problems_json=(
        '{"tasks": [], "answers": []}'))).replaced
    assert j.tasks("r", league.db.step_summaries("r"), 1, True)["tasks"] == []  # the cache sees the new record
    # a run the league did not know is created by its first record
    assert league.RecordRun(pb.RecordRunRequest(run_id="new", mode="baseline", status="running")).created
    assert league.db.run_exists("new") and j.run("new").mode == "baseline"


def _phases(**fields) -> pb.RecordPhasesRequest:
    phase = dict(step=1, phase="match", seconds=0.5, attempts=1, finished_at=10.0) | fields
    return pb.RecordPhasesRequest(run_id="r", phases=[pb.PhaseProgress(**phase)])


@pytest.mark.parametrize(("call", "why"), [
    (lambda s: s.RecordRun(pb.RecordRunRequest(run_id="r", status="done")), "status: 'done' is not one of"),
    (lambda s: s.RecordRun(pb.RecordRunRequest(run_id="", status="running")), "run_id: must not be empty"),
    (lambda s: s.RecordRun(pb.RecordRunRequest(run_id="r\n", status="running")), "control character"),
    (lambda s: s.RecordRun(pb.RecordRunRequest(run_id="r", mode="m" * 33, status="running")), "mode: 33"),
    (lambda s: s.RecordPhases(_phases(phase="")), "phases[0].phase: must not be empty"),
    (lambda s: s.RecordPhases(_phases(phase="p" * 33)), "phases[0].phase: 33 characters"),
    (lambda s: s.RecordPhases(_phases(step=-1)), "phases[0].step: -1 is outside"),
    (lambda s: s.RecordPhases(_phases(seconds=math.nan)), "phases[0].seconds: nan"),
    (lambda s: s.RecordPhases(_phases(finished_at=-1.0)), "phases[0].finished_at: -1.0"),
    (lambda s: s.RecordPhases(_phases(attempts=-2)), "phases[0].attempts: -2 is negative"),
    (lambda s: s.RecordPhases(_phases(error="boom")), "only a phase that failed has an error"),
    (lambda s: s.RecordPhases(_phases(failed=True, error="x" * 2001)), "phases[0].error: 2001 characters"),
    (lambda s: s.RecordPhases(pb.RecordPhasesRequest(run_id="r", phases=[pb.PhaseProgress(step=1, phase="m")] * 2)),
     "phase 'm' of step 1 appears twice"),
    (lambda s: s.RecordPhases(pb.RecordPhasesRequest(run_id="nope", phases=[])), "run 'nope' does not exist"),
    (lambda s: s.RecordStepProblems(pb.RecordStepProblemsRequest(run_id="r", step=1, problems_json="[]")),
     "problems_json: must be a JSON object"),
    (lambda s: s.RecordStepProblems(pb.RecordStepProblemsRequest(run_id="r", step=1, problems_json='{"tasks": []}')),
     "problems_json.answers: must be a list"),
    (lambda s: s.RecordStepProblems(pb.RecordStepProblemsRequest(
        run_id="r", step=1, problems_json='{"tasks": [1], "answers": []}')), "problems_json.tasks[0]: must be"),
    (lambda s: s.RecordStepProblems(pb.RecordStepProblemsRequest(
        run_id="r", step=1, problems_json='{"tasks": [{"rho": NaN}], "answers": []}')), "not valid JSON"),
    (lambda s: s.RecordStepProblems(pb.RecordStepProblemsRequest(
        run_id="nope", step=1, problems_json='{"tasks": [], "answers": []}')), "run 'nope' does not exist"),
])
def test_a_bad_record_is_refused_naming_the_field_and_changes_nothing(run, call, why):
    _state, league, j = run
    before = (league.db.run_record("r"), league.db.phase_rows("r"), league.db.step_problems("r", [1]))
    with pytest.raises(ServiceError, match=re.escape(why)):
        call(league)
    assert (league.db.run_record("r"), league.db.phase_rows("r"), league.db.step_problems("r", [1])) == before


def test_the_records_are_writes_that_need_the_token(run):
    import grpc

    from tests.conftest import served

    _state, league, _j = run
    for name in ("RecordRun", "RecordPhases", "RecordStepProblems"):
        assert not is_read_only(league.CONTRACT.methods_by_name[name])
    with served(league, token="wrong") as client:
        for call in (lambda: client.RecordRun(pb.RecordRunRequest(run_id="r", status="failed")),
                     lambda: client.RecordPhases(_phases(phase="evolve")),
                     lambda: client.RecordStepProblems(pb.RecordStepProblemsRequest(
                         run_id="r", step=9, problems_json='{"tasks": [], "answers": []}'))):
            with pytest.raises(ServiceError) as e:
                call()
            assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert league.db.run_record("r").status == "running" and league.db.problem_steps("r", 9) == []
    with served(league) as client:  # the token opens them, over gRPC as in distributed mode
        assert client.RecordPhases(_phases(phase="evolve", step=7)).recorded == 1
    assert PhaseRow(7, "evolve", 0.5, 1, 10.0) in league.db.phase_rows("r")


@pytest.mark.parametrize("bad", [{"tasks": "x", "inputs": 3}, [1, None, {"id": 3}], "text",
                                 [{"id": 5, "valid": "yes", "inputs": "ab", "complexity": [1], "rho": "high",
                                   "version": 1.5, "teacher_id": None}]])
def test_problems_of_another_layout_read_as_gaps_never_errors(run, bad):
    _state, league, j = run
    problems = {"tasks": bad, "answers": bad} if isinstance(bad, list) else bad
    with league.db.engine.begin() as c:  # what a later coordinator might send, or a row damaged in the database
        c.execute(sa.text("UPDATE league_step_problems SET problems_json = :j WHERE step = 1"),
                  {"j": json.dumps(problems)})
    tasks = j.tasks("r", [], 1, True)
    assert tasks["step"] == 1 and all(t["id"] in ("", "r/1/T0/code_o/p0") for t in tasks["tasks"])
    samples = j.samples("r", "T0", 5)
    assert samples["answers"] == [] and all(p["program"] == "" for p in samples["proposals"])
    with league.db.engine.begin() as c:
        c.execute(sa.text("UPDATE league_step_problems SET problems_json = '{not json', recorded_at = 1"))
    assert j.tasks("r", [], 1, True)["tasks"] == [] and j.samples("r", "S0", 5)["answers"] == []
    json.dumps(j.overview("r", league.db.step_summaries("r")), allow_nan=False)


def test_a_failed_phase_is_reported(run):
    state, league, j = run
    state.put("r", 2, "match", {"pairings": []}, seconds=0.1)
    state.put("r", 2, "failed:propose", {"error": "inference: out of memory", "trace": "..."}, seconds=0.0)
    progress = RunProgress(league, state, "r")
    progress.step(2)  # as the coordinator does when its dispatched phase failed for good
    progress.status("failed")
    ov = j.overview("r", league.db.step_summaries("r"))
    assert ov["error"] == {"step": 2, "phase": "propose", "error": "inference: out of memory"}
    assert ov["progress"]["done"]["phase"] == "match" and ov["progress"]["in_progress"] is None
    assert ov["status"] == "failed"
    # a late delivery that stored the phase after all: sent as stored, not as failed
    state.put("r", 2, "propose", {"proposals": []}, seconds=0.2)
    progress.step(2)
    assert j.overview("r", league.db.step_summaries("r"))["error"] is None


def test_a_run_the_coordinator_never_recorded(sqlite_url):
    """The league alone, or a run recorded before league migration 0007: no progress, problems or samples until the
    coordinator records them (`populora train --resume` of the run)."""
    league = make_service(sqlite_url)
    league.CreateRun(pb.CreateRunRequest(run_id="r", mode="population", config_yaml=CONFIG))
    j = RunView(league.db)
    ov = j.overview("r", [])
    assert (ov["status"], ov["journal_rows"], ov["progress"]) == ("unknown", 0, {"done": None, "in_progress": None})
    assert j.run("r") is None and j.tasks("r", [], None, True)["tasks"] == []
    assert j.samples("r", "T0", 5) == {"adapter_id": "T0", "proposals": [], "answers": []}
    league.close()


@pytest.mark.slow
def test_per_step_figures_equal_the_coordinators_own_metrics(short_run):
    """On the real cpu-tiny run: what the dashboard shows per step is what metrics.jsonl says."""
    from coordinator.record.stepmetrics import read_metrics
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
        assert ours["compute"] == {**{k: theirs["compute"][k] for k in ("generated_tokens", "trained_tokens",
                                                                          "sandbox_jobs", "flops")},
                                   "budget_flops": (theirs["compute_cumulative"]["budget_flops"]
                                                    - rows[step - 1]["compute_cumulative"]["budget_flops"])}
        assert ours["dynamics"]["solve_rates"] == theirs["student_solve_rate"]
        assert ours["matches"] == theirs["matches_reported"]
        assert [e["child"] for e in ours["evolution"]] == [e["child"] for e in theirs.get("evolution", [])]
        for tt, m in theirs["task_types"].items():
            mine = ours["task_types"].get(tt, {})
            assert mine.get("valid_rate") == m["valid_rate"], (step, tt)
            assert mine.get("rejections", {}) == m["rejections"], (step, tt)
            assert mine.get("solve_rate") == pytest.approx(m["solve_rate"]) if m["solve_rate"] is not None \
                else mine.get("solve_rate") is None


def test_records_replace_on_both_backends(league):
    """The upserts of RecordRun and RecordPhases, on SQLite and Postgres: replayed, a row is replaced, not added."""
    assert league.RecordRun(pb.RecordRunRequest(run_id="r", mode="population", config_yaml=CONFIG,
                                                status="running")).created
    phases = [pb.PhaseProgress(step=0, phase="init", seconds=1.0, attempts=1, finished_at=5.0),
              pb.PhaseProgress(step=1, phase="propose", seconds=0.0, attempts=4, finished_at=6.0, failed=True,
                               error="inference: out of memory")]
    for _ in range(2):
        assert league.RecordPhases(pb.RecordPhasesRequest(run_id="r", phases=phases)).recorded == 2
        assert not league.RecordRun(pb.RecordRunRequest(run_id="r", mode="population", config_yaml=CONFIG,
                                                        status="failed")).created
    assert league.db.phase_rows("r") == [PhaseRow(0, "init", 1.0, 1, 5.0),
                                         PhaseRow(1, "propose", 0.0, 4, 6.0, "inference: out of memory")]
    league.RecordPhases(pb.RecordPhasesRequest(run_id="r", phases=[pb.PhaseProgress(
        step=1, phase="propose", seconds=2.0, attempts=1, finished_at=7.0)]))
    assert league.db.phase_rows("r")[-1] == PhaseRow(1, "propose", 2.0, 1, 7.0)
    run = RunView(league.db).run("r")
    assert (run.status, run.mode, run.setting("run", "steps")) == ("failed", "population", 4)
    for replaced in (False, True):
        assert league.RecordStepProblems(pb.RecordStepProblemsRequest(
            run_id="r", step=1, problems_json='{"tasks": [], "answers": []}')).replaced is replaced
    assert [s for s, _ in league.db.problem_steps("r")] == [1]


@pytest.mark.slow
def test_progress_and_problems_are_the_journals_on_a_real_run(short_run):
    """On the real cpu-tiny run: the league holds the run, every phase row and each step's proposals and answers as
    the coordinator's journal does, without reading it."""
    from services.league.db import LeagueDB

    run_id, state = short_run.run_id, short_run.state
    db = LeagueDB(short_run.url)
    try:
        journal = sorted((r["step"], r["phase"], r["seconds"], r["attempts"], r["finished_at"])
                         for r in state.phase_rows(run_id))
        assert sorted((r.step, r.phase, r.seconds, r.attempts, r.finished_at) for r in db.phase_rows(run_id)) \
            == journal
        stored, recorded = state.get_run(run_id), db.run_record(run_id)
        assert (recorded.status, recorded.mode, recorded.config_yaml) == (stored["status"], stored["mode"],
                                                                          stored["config_yaml"])
        steps = sorted({s for s, *_ in journal if s >= 1})
        assert sorted(s for s, _ in db.problem_steps(run_id)) == steps
        for step in steps:
            problems = json.loads(db.step_problems(run_id, [step])[step][1])
            assert [t["id"] for t in problems["tasks"]] == [p["id"] for p in state.get(run_id, step, "propose")
                                                             ["proposals"]]
            check = state.get(run_id, step, "check")
            assert {a["id"]: a["outcome"] for a in problems["answers"]} == check["outcomes"]
    finally:
        db.close()
