"""The league's reading of the coordinator's phase journal (services/league/runview.py): rows written by the
coordinator's own JournalDB, read back by SQL; malformed rows read as gaps, never errors; and on a real run the
per-step figures equal the coordinator's own metrics (coordinator/stepmetrics.py)."""

from __future__ import annotations

import json
import math

import pytest
import sqlalchemy as sa

from coordinator.journal import JournalDB
from services.league.runview import Journal, version_path

CONFIG = "run:\n  steps: 4\n  mode: population\n  output_dir: /data/runs\nevolution:\n  every_k: 2\n" \
         "store:\n  root: '{output_dir}/store'\n"


def _task(program: str) -> dict:
    return {"task_type": "code_o", "program": program, "inputs": ["1", "2"], "outputs": ["2", "4"],
            "message": "doubles", "complexity": {"ast_depth": 4, "cyclomatic": 1, "lines_of_code": 2}}


def _write_step(state: JournalDB, run: str, step: int) -> None:
    """One training step as the coordinator persists it (module docstring of runview: the keys it reads)."""
    m = f"{run}/{step}/T0/code_o"
    results = {
        "match": {"pairings": [{"match_id": m, "teacher": "T0", "student": "S0", "task_type": "code_o",
                                "p_student": 1.0}]},
        "propose": {"proposals": [
            {"id": f"{m}/p0", "match_id": m, "task_type": "code_o", "teacher": "T0", "text": "<answer>ok</answer>",
             "response_token_ids": [1, 2, 3], "prompt_token_ids": [9] * 50, "version": step},
            {"id": f"{m}/p1", "match_id": m, "task_type": "code_o", "teacher": "T0", "text": "rambling",
             "response_token_ids": [1, 2], "prompt_token_ids": [9] * 50, "version": step}]},
        "validate": {"verdicts": {f"{m}/p0": {"valid": True, "reason": "ok", "detail": "", "task":
                                              _task("def f(a):\n    return a * 2")},
                                  f"{m}/p1": {"valid": False, "reason": "no_answer", "detail": "no <answer>",
                                              "task": None}},
                     "buffers": {"code_o": ["huge"] * 100}},
        "solve": {"attempts": [{"id": f"{m}/p0/a{k}", "task_id": f"{m}/p0", "student": "S0", "match_id": m,
                                "text": f"answer {k}", "response_token_ids": [5] * 4, "prompt_token_ids": [9]}
                               for k in range(2)]},
        "check": {"outcomes": {f"{m}/p0/a0": "correct", f"{m}/p0/a1": "wrong"}, "rho": {f"{m}/p0": 0.5}},
        "rate": {"applied": 1, "duplicates": 0, "reported": [m], "ratings": {}},
        "update": {"population": {"T0": {"role": "teacher", "version": step + 1},
                                  "S0": {"role": "student", "version": step + 1}},
                   "stats": {"T0": {"loss": 0.1, "tokens": 5}, "S0": {"loss": 0.2, "tokens": 8}}},
        "account": {"adapters": {"T0": {"generated_tokens": 5, "trained_tokens": 105, "sandbox_jobs": 0},
                                 "S0": {"generated_tokens": 8, "trained_tokens": 10, "sandbox_jobs": 0}},
                    "total": {"generated_tokens": 13, "trained_tokens": 115, "sandbox_jobs": 4}},
    }
    for phase, result in results.items():
        state.put(run, step, phase, result, seconds=0.5)


@pytest.fixture
def journal(sqlite_url):
    state = JournalDB(sqlite_url)
    state.create_run("r", "population", CONFIG)
    state.put("r", 0, "init", {"population": {"T0": {"role": "teacher", "version": 1},
                                              "S0": {"role": "student", "version": 1}}}, seconds=1.0)
    state.put("r", 0, "seed", {"sizes": {"code_o": 3}, "reasons": {"ok": 2, "no_answer": 5}, "rounds": 2,
                               "proposals": 7, "buffers": {}}, seconds=2.0)
    _write_step(state, "r", 1)
    yield state, Journal(sa.create_engine(sqlite_url))
    state.close()


def test_step_summary_from_the_documented_layout(journal):
    state, j = journal
    steps = j.steps("r", public=False)
    assert [s["step"] for s in steps] == [0, 1]
    assert [set(s) & {"population", "versions"} for s in j.steps("r")] == [set(), set()]  # not served per step
    seed, one = steps
    assert seed["seed"] == {"sizes": {"code_o": 3}, "reasons": {"ok": 2, "no_answer": 5}, "rounds": 2,
                            "proposals": 7}
    assert seed["population"] == {"T0": 1, "S0": 1}
    assert (one["proposals"], one["valid"], one["valid_rate"], one["rejections"]) == (2, 1, 0.5, {"no_answer": 1})
    tt = one["task_types"]["code_o"]
    assert (tt["valid_rate"], tt["solve_rate"], tt["ast_depth"], tt["lines_of_code"]) == (0.5, 0.5, 4, 2)
    assert one["outcomes"] == {"correct": 1, "wrong": 1} and one["matches"] == 1
    assert one["compute"] == {"generated_tokens": 3 + 2 + 4 + 4, "trained_tokens": 115, "sandbox_jobs": 4}
    state.put("r", 5, "update", {"population": {}, "stats": {"T0": {"tokens": 7}}}, seconds=0.1)  # no account: counted
    legacy = j.summary("r", 5, [r for r in j.rows("r") if r.step == 5])
    assert legacy["compute"] == {"generated_tokens": 0, "trained_tokens": 7, "sandbox_jobs": None}
    assert one["seconds"]["solve"] == 0.5 and one["step_seconds"] == 4.0  # 8 phases of 0.5 s, account included
    assert one["population"] == {"T0": 2, "S0": 2}


def test_progress_versions_tasks_and_samples(journal):
    state, j = journal
    ov = j.overview("r")
    assert ov["status"] == "running" and ov["steps_planned"] == 4
    assert ov["progress"]["done"]["phase"] == "account" and ov["progress"]["in_progress"] == {"step": 2,
                                                                                             "phase": "match"}
    _write_step(state, "r", 2)  # step 2 evolves (every_k = 2): after update comes evolve
    assert j.overview("r")["progress"]["in_progress"] == {"step": 2, "phase": "evolve"}
    state.put("r", 2, "evolve", {"population": {"T9": {"role": "teacher", "version": 1},
                                                "S0": {"role": "student", "version": 3}},
                                 "events": [{"step": 2, "role": "teacher", "retired": "T0", "child": "T9",
                                             "parents": ["T0"], "operator": "M1", "relative_change": math.nan}]},
              seconds=0.1)
    ov = j.overview("r")
    assert ov["progress"]["in_progress"] == {"step": 3, "phase": "match"}
    assert ov["evolution"] == [{"step": 2, "role": "teacher", "retired": "T0", "child": "T9", "parents": ["T0"],
                                "operator": "M1", "relative_change": None}]
    assert ov["compute"]["generated_tokens"] == 2 * 13
    state.set_status("r", "finished")
    assert j.overview("r")["progress"]["in_progress"] is None
    assert j.versions("r", "T0") == [{"version": 1, "step": 0}, {"version": 2, "step": 1}, {"version": 3, "step": 2}]
    assert j.versions("r", "S0")[-1] == {"version": 3, "step": 2}
    run = j.run("r")
    assert version_path(run.store_root(), "T0", 3) == "/data/runs/store/adapters/T0/v3"
    tasks = j.tasks("r", None, include_invalid=False)
    assert tasks["step"] == 2 and [t["id"] for t in tasks["tasks"]] == ["r/2/T0/code_o/p0"]
    t = tasks["tasks"][0]
    assert (t["teacher_id"], t["student_id"], t["rho"], t["outputs"]) == ("T0", "S0", 0.5, ["2", "4"])
    assert [s["step"] for s in tasks["steps"]] == [1, 2]
    assert len(j.tasks("r", 1, include_invalid=True)["tasks"]) == 2
    samples = j.samples("r", "T0", limit=3)
    assert [p["step"] for p in samples["proposals"]] == [2, 2, 1] and samples["answers"] == []
    assert samples["proposals"][1]["reason"] == "no_answer"
    answers = j.samples("r", "S0", limit=10)["answers"]
    assert [a["outcome"] for a in answers] == ["correct", "wrong"] * 2 and answers[0]["program"].startswith("def")


def test_token_ids_and_buffers_are_not_kept(journal):
    _state, j = journal
    got = j.results("r", 1, ["propose", "validate"])
    assert "buffers" not in got["validate"]
    p = got["propose"]["proposals"][0]
    assert p["response_tokens"] == 3 and "prompt_token_ids" not in p and "response_token_ids" not in p


@pytest.mark.parametrize("bad", [[1, 2], "text", {"proposals": "x"}, {"proposals": [1, None, {"id": 3}]},
                                 {"verdicts": {"x": 5}}, {"outcomes": [], "rho": {"a": "high"}},
                                 {"population": {"T0": {"version": "one"}}}, {"events": [{"parents": 3}]}])
def test_a_journal_of_another_layout_reads_as_gaps_never_errors(sqlite_url, bad):
    state = JournalDB(sqlite_url)
    state.create_run("r", "population", "not: [valid yaml")
    for phase in ("match", "propose", "validate", "solve", "check", "rate", "update", "evolve"):
        state.put("r", 1, phase, bad, seconds=0.1)
    with state.engine.begin() as c:
        c.execute(sa.text("INSERT INTO coord_phases VALUES ('r', 2, 'propose', '{not json', 1.0, 1, 0.0)"))
    j = Journal(sa.create_engine(sqlite_url))
    ov = j.overview("r")
    assert ov["latest_step"]["step"] == 2 and ov["steps_planned"] is None
    assert isinstance(j.steps("r"), list) and j.tasks("r", 1, True)["step"] == 1
    assert j.samples("r", "T0", 5) == {"adapter_id": "T0", "proposals": [], "answers": []}
    assert j.versions("r", "T0") == []
    json.dumps(ov, allow_nan=False)
    state.close()


def test_a_failed_phase_is_reported(journal):
    state, j = journal
    state.put("r", 2, "match", {"pairings": []}, seconds=0.1)
    state.put("r", 2, "failed:propose", {"error": "inference: out of memory"}, seconds=0.0)
    state.set_status("r", "failed")
    ov = j.overview("r")
    assert ov["error"] == {"step": 2, "phase": "propose", "error": "inference: out of memory"}
    assert ov["progress"]["done"]["phase"] == "match" and ov["progress"]["in_progress"] is None


def test_without_journal_tables(sqlite_url):
    j = Journal(sa.create_engine(sqlite_url))
    assert j.overview("r") is None and j.steps("r") == [] and j.results("r", 1, ["propose"]) == {}


@pytest.mark.slow
def test_per_step_figures_equal_the_coordinators_own_metrics(short_run):
    """On the real cpu-tiny run: what the dashboard shows per step is what metrics.jsonl says."""
    from coordinator.stepmetrics import read_metrics

    rows = {r["step"]: r for r in read_metrics(short_run.root / "runs" / short_run.run_id)}
    j = Journal(sa.create_engine(short_run.url))
    steps = {s["step"]: s for s in j.steps(short_run.run_id)}
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
            assert mine.get("ast_depth") == pytest.approx(m["ast_depth"]) if m["ast_depth"] is not None \
                else mine.get("ast_depth") is None
