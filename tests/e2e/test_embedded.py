"""End-to-end, embedded: one process, in-process clients, SQLite; a few real steps including one evolution."""

import json
import os

import pytest
import sqlalchemy as sa

from coordinator.run.journal import Journal
from coordinator.run.phases import rollouts
from coordinator.train import run_training
from populora.config import load_config
from populora.store import ArtifactStore
from services.league.db import LeagueDB
from tests.e2e.conftest import e2e_overrides
from tests.e2e.records import (
    GOLDEN,
    differences,
    golden_records,
    learning_signal,
    made_here,
    run_records,
    seeded_run,
    train,
    write_golden,
)

STEP_PHASES = ["match", "propose", "validate", "solve", "check", "rate", "update"]


def _run(cfg, run_id, steps):
    state, run_dir = train(cfg, run_id, steps)
    return ArtifactStore(cfg.store_root), state, run_dir


def _done(state, run_id):
    return [(r["step"], r["phase"]) for r in state.phase_rows(run_id)]


@pytest.fixture(scope="module")
def seeded_e2e(tmp_path_factory, echo_model):
    """The seeded run (GOLDEN's: run id "e2e", two steps, lock-step), made once for this file's tests: (config,
    journal, run directory, reference records). Its records are the one-process run the distributed runs are compared
    with (`made_here`), unless another test made that run first: then it is that run's (and must equal this one)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as every end-to-end run (conftest.py); this fixture is made before `_one_thread`
    try:
        cfg, state, run_dir = seeded_run(tmp_path_factory.mktemp("seeded"), echo_model)
    finally:
        torch.set_num_threads(threads)
    got = run_records(state, cfg.league_db_url, "e2e")
    return cfg, state, run_dir, made_here(echo_model, lambda _work: got)


@pytest.mark.reference
def test_population_run_agrees_with_itself(seeded_e2e):
    cfg, state, run_dir, reference = seeded_e2e
    store = ArtifactStore(cfg.store_root)

    # every phase of every step ran, in order, and was persisted once
    expected = [(0, "warmstart"), (0, "init"), (0, "seed"), (0, "account"), *((1, p) for p in STEP_PHASES),
                (1, "account"), *((2, p) for p in STEP_PHASES), (2, "evolve"), (2, "account")]
    assert _done(state, "e2e") == expected

    # the echo model writes valid and invalid proposals, right and wrong answers: students were matched against
    # real tasks, and every step's updates, of teachers and students, had something to learn from
    propose = [state.get("e2e", s, "propose") for s in (1, 2)]
    validate = [state.get("e2e", s, "validate") for s in (1, 2)]
    for val in validate:
        assert {v["valid"] for v in val["verdicts"].values()} == {True, False}, val["verdicts"]
    assert sum(len(p["proposals"]) for p in propose) == 2 * 2 * 3 * 4  # 2 teachers x 3 task types x 4, two steps
    for s in (1, 2):
        assert set(state.get("e2e", s, "check")["outcomes"].values()) == {"correct", "wrong"}
    got = run_records(state, cfg.league_db_url, "e2e")
    assert learning_signal(got) == {1: {"teacher", "student"}, 2: {"teacher", "student"}}
    # the reference the distributed runs are compared with is this run, or a second seeded run that equals it
    diff = differences(reference, got)
    assert not diff, "two seeded runs differ:\n" + "\n".join(diff)

    engine = sa.create_engine(cfg.league_db_url)
    with engine.connect() as c:
        db_matches = c.execute(sa.text("SELECT match_id, teacher_id, student_id, step FROM league_matches"
                                       " WHERE run_id='e2e'")).all()
        adapters = {r.adapter_id: r for r in c.execute(sa.text(
            "SELECT adapter_id, role, status, sigma, matches, parents_json, operator FROM league_adapters"
            " WHERE run_id='e2e'")).all()}
        edges = c.execute(sa.text("SELECT parent_id, child_id, operator, step FROM league_lineage"
                                  " WHERE run_id='e2e'")).all()
    engine.dispose()

    # matches in the league = matches the coordinator reported, each once
    reported = [m for s in (1, 2) for m in state.get("e2e", s, "rate")["reported"]]
    assert sorted(m.match_id for m in db_matches) == sorted(reported) and len(set(reported)) == len(reported)
    assert reported, "no match was reported"
    for m in db_matches:  # teacher vs student, of this run
        assert adapters[m.teacher_id].role == "teacher" and adapters[m.student_id].role == "student"
    # ratings moved exactly for the adapters that played
    played = {m.teacher_id for m in db_matches} | {m.student_id for m in db_matches}
    for a, row in adapters.items():
        assert (row.sigma < cfg.league.sigma - 1e-9) == (a in played), a
        assert row.matches == sum(a in (m.teacher_id, m.student_id) for m in db_matches)

    # lineage = the evolve phase's events; retired members are kept, marked retired
    events = state.get("e2e", 2, "evolve")["events"]
    assert len(events) == 2  # ceil(0.25 * 2) per sub-population
    assert sorted((e.parent_id, e.child_id) for e in edges) == sorted(
        (p, ev["child"]) for ev in events for p in ev["parents"])
    for ev in events:
        assert adapters[ev["retired"]].status == "retired"
        assert adapters[ev["child"]].status == "active" and adapters[ev["child"]].operator == ev["operator"]
        assert json.loads(adapters[ev["child"]].parents_json) == ev["parents"]

    # adapter versions in the store = 1 (init) + updates applied; the records' digests are the stored versions',
    # and an update with a gradient moved the weights and the optimizer state
    updates: dict[str, int] = {}
    for s in (1, 2):
        update = state.get("e2e", s, "update")
        for a, st in update["stats"].items():
            updates[a] = updates.get(a, 0) + 1
            version = update["population"][a]["version"]
            before, after = (store.digests(store.ref(a, v)) for v in (version - 1, version))
            digest = update["digests"][a]
            assert (digest["weights_digest"], digest["optimizer_digest"]) == after, a
            assert st["grad_norm"] == 0 or (after[0] != before[0] and after[1] != before[1]), a
    for a in state.get("e2e", 0, "init")["population"]:
        assert store.versions(a)[-1] == 1 + updates.get(a, 0), a
    final = state.get("e2e", 2, "evolve")["population"]
    for ev in events:
        assert ev["child"] in final and ev["retired"] not in final
        assert store.versions(ev["child"]) == [1]

    # visibility: one metrics line per step, TensorBoard events, the report with its plots
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert rows[2]["evolution"] and set(rows[1]["task_types"]) == {"code_i", "code_o", "code_f"}
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    from coordinator.record.report import write_report

    report = write_report(run_dir)
    for png in ("solve_rate.png", "complexity.png", "ratings.png", "lineage.png"):
        assert (run_dir / png).stat().st_size > 1000
    assert "lineage.png" in report.read_text()


def test_the_seeded_run_has_the_committed_records(echo_model):
    """The seeded run is the run it always was: the same records as the committed ones (tests/e2e/records.py says
    why, and when to renew them). They were made with one machine's echo model; where this machine fits another,
    the comparison is skipped, naming both models' digests."""
    # the committed records train in every step, whichever machine made them
    assert learning_signal(json.loads(GOLDEN.read_text())) == {1: {"teacher", "student"}, 2: {"teacher", "student"}}
    if os.environ.get("POPULORA_UPDATE_GOLDEN"):
        write_golden(made_here(echo_model), echo_model)
    golden = golden_records(echo_model)  # skips here unless they were made with this machine's echo model
    diff = differences(golden, made_here(echo_model))  # the seeded run of seeded_run, made by this code
    assert not diff, "the seeded run's records changed:\n" + "\n".join(diff)


def test_baseline_evaluated_every_step_and_resumed(tmp_path, echo_model):
    """The baseline (one adapter in both roles) with eval.every=1: the `eval` phase runs at step 0 (the bare base model
    too) and after every step, is persisted like any phase, records the scores in the league, and reaches the metrics
    and the report as a table and a plot. Stopped between the steps and resumed, as a run recorded before league
    migration 0007 left the league: no stored phase is redone, the eval phase neither."""
    over = e2e_overrides(tmp_path, echo_model) + ["run.mode=baseline", "rewards.teacher_reward=learnability",
                                                  "population.n_teachers=1", "population.n_students=1", "eval.every=1",
                                                  "eval.limit=3", "eval.max_new_tokens=16"]
    cfg = load_config(preset="cpu-tiny", overrides=over, env=False)
    store, state, run_dir = _run(cfg, "base", 1)
    assert state.get("base", 0, "init")["population"] == {"base.B0": {"role": "both", "version": 1}}
    pairings = state.get("base", 1, "match")["pairings"]
    assert {(p["teacher"], p["student"]) for p in pairings} == {("base.B0", "base.B0")}
    assert state.get("base", 1, "evolve") is None  # one adapter: nothing to evolve
    assert [s for s, p in _done(state, "base") if p == "eval"] == [0, 1]
    # stop between steps, then resume: step 1 is not redone, step 2 runs
    before = set(_done(state, "base"))
    first = {(r["step"], r["phase"]): r["finished_at"] for r in state.phase_rows("base")}
    league = LeagueDB(cfg.league_db_url)
    with league.engine.begin() as c:  # as a run recorded before league migration 0007 left the league
        for table in ("league_phase_progress", "league_step_problems", "league_run_status"):
            c.execute(sa.text(f"DELETE FROM {table} WHERE run_id = 'base'"))
    cfg.run.steps = 2
    run_training(cfg, "base", state)
    after = state.phase_rows("base")
    # the resume recorded again what the dashboard shows of the steps it read back, and of the one it ran
    assert {(r.step, r.phase) for r in league.phase_rows("base")} == {(r["step"], r["phase"]) for r in after}
    assert [s for s, _ in league.problem_steps("base")] == [2, 1] and league.run_record("base").status == "finished"
    league.close()
    assert {(r["step"], r["phase"]) for r in after if r["step"] <= 1} == before
    assert all(first[(r["step"], r["phase"])] == r["finished_at"] for r in after if r["step"] <= 1)
    assert all(r["attempts"] == 1 for r in after)
    # one adapter: no evolve; the eval phase after the step's accounting
    assert [p for s, p in _done(state, "base") if s == 2] == STEP_PHASES + ["account", "eval"]
    assert [r["step"] for r in after if r["phase"] == "eval"] == [0, 1, 2]
    # the single adapter trained in both roles
    j = Journal(state, "base")
    roles = {r.role for s in (1, 2) for r in rollouts(cfg.rewards, j.get(s, "propose"), j.get(s, "validate"),
                                                       j.get(s, "solve"), j.get(s, "check"))["base.B0"]}
    assert roles == {"teacher", "student"}
    assert store.versions("base.B0")[-1] == 1 + sum(
        bool(state.get("base", s, "update")["stats"]) for s in (1, 2))

    # the held-out scores: the bare base model at step 0 only, the adapter at every step
    zero = j.get(0, "eval")
    assert zero.benchmark == "heldout" and [s.label for s in zero.scores] == ["base", "base.B0@v1"]
    assert all(s.n_problems == 3 and len(s.problems) == 3 for s in zero.scores)
    assert [s.adapter_id for s in j.get(2, "eval").scores] == ["base.B0"]  # the base model only once

    from populora.pb import league_pb2
    from services.league.service import LeagueService

    league = LeagueService.from_config(cfg)
    got = league.GetEvals(league_pb2.GetEvalsRequest(run_id="base")).scores
    league.close()
    stored = {(s.adapter_id, s.version) for s in got}
    assert ("", 0) in stored and ("base.B0", 1) in stored
    assert all(s.benchmark == "heldout" and s.n_problems == 3 for s in got)

    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["eval"]["benchmark"] for m in metrics] == ["heldout"] * 3
    assert set(metrics[0]["eval"]["pass_at_1"]) == {"base", "base.B0@v1"}
    from coordinator.record.report import write_report

    page = write_report(run_dir).read_text()
    assert "Held-out evaluation" in page and "evals.png" in page and (run_dir / "evals.png").stat().st_size > 1000


def _tokens_in_records(j: Journal, cfg, steps: int) -> int:
    """Generated + trained tokens (spec 14) counted straight from the stored phase results; a row the update skips
    (zero advantage) is not trained on and not counted."""
    from coordinator.run.phases.accounting import charged_rows

    total = j.get(0, "seed").generated_tokens
    for s in range(1, steps + 1):
        proposed, solved = j.get(s, "propose"), j.get(s, "solve")
        total += sum(len(p.response_token_ids) for p in proposed.proposals)
        total += sum(len(a.response_token_ids) for a in solved.attempts)
        batch = rollouts(cfg.rewards, proposed, j.get(s, "validate"), solved, j.get(s, "check"))
        updated = j.get(s, "update").stats
        total += cfg.trainer.epochs * sum(len(r.prompt_token_ids) + len(r.response_token_ids)
                                          for a, rows in batch.items() if a in updated
                                          for r in charged_rows(rows, cfg.trainer.entropy_coef))
    return total


@pytest.mark.reference
def test_compute_is_counted_and_a_budget_stops_the_run(tmp_path, echo_model, seeded_e2e):
    from populora.pb import league_pb2
    from services.league.service import LeagueService

    cfg, state, run_dir, _ = seeded_e2e  # the seeded two-step run
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    counted = _tokens_in_records(Journal(state, "e2e"), cfg, 2)
    assert rows[-1]["compute_cumulative"]["tokens"] == counted > 0
    assert all(r["compute"]["sandbox_jobs"] > 0 for r in rows)
    # beside the jobs, the CPU time they used, as the sandbox's kernel counted it, per step and summed
    assert all(r["compute"]["sandbox_cpu_seconds"] > 0 for r in rows)
    assert rows[-1]["compute_cumulative"]["sandbox_cpu_seconds"] == pytest.approx(
        sum(r["compute"]["sandbox_cpu_seconds"] for r in rows))
    league = LeagueService.from_config(cfg)
    try:
        got = league.GetCompute(league_pb2.GetComputeRequest(run_id="e2e"))
    finally:
        league.close()
    assert got.total.generated_tokens + got.total.trained_tokens == counted
    assert got.total.sandbox_jobs == rows[-1]["compute_cumulative"]["sandbox_jobs"]
    j = Journal(state, "e2e")
    writers = {p.teacher for s in (1, 2) for p in j.get(s, "propose").proposals}
    writers |= {a.student for s in (1, 2) for a in j.get(s, "solve").attempts}
    assert {u.adapter_id for u in got.adapters} == {"base"} | writers  # every adapter that generated, and no other

    # the same run with a budget one token past what step 0 spent: it stops after step 1, the first boundary past it
    after_step0 = rows[0]["compute_cumulative"]["tokens"]
    over = [o for o in e2e_overrides(tmp_path / "b", echo_model)] + [f"run.budget_tokens={after_step0 + 1}"]
    budget_cfg = load_config(preset="cpu-tiny", overrides=over, env=False)
    _, state_b, run_dir_b = _run(budget_cfg, "e2e", 3)
    rows_b = [json.loads(x) for x in (run_dir_b / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows_b] == [0, 1] and rows_b[-1]["stopped"].startswith("budget: tokens")
    assert rows_b[-1]["compute_cumulative"]["tokens"] == _tokens_in_records(Journal(state_b, "e2e"), budget_cfg, 1)
    assert not [r for r in state_b.phase_rows("e2e") if r["step"] > 1]
