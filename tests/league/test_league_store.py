"""League storage on both backends: migrations, idempotent reports, validation that writes nothing, children,
lineage, matchmaking and selection through the service."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
import trueskill
from grpc import StatusCode

from populora.pb import league_pb2 as pb
from populora.rpc import ServiceError
from services.league.db import LeagueDB
from services.league.ratings import RatingParams

LEAGUE_TABLES = {"league_runs", "league_adapters", "league_rating_history", "league_matches", "league_lineage",
                 "league_payoff"}


def _tables(db: LeagueDB) -> set[str]:
    with db.engine.connect() as conn:
        return set(sa.inspect(conn).get_table_names())


def setup_run(league, teachers=("T0", "T1"), students=("S0", "S1", "S2"), run="r1"):
    league.CreateRun(pb.CreateRunRequest(run_id=run, mode="population"))
    specs = [pb.AdapterSpec(adapter_id=t, role="teacher", rank=8) for t in teachers]
    specs += [pb.AdapterSpec(adapter_id=s, role="student", rank=8) for s in students]
    return league.RegisterAdapters(pb.RegisterAdaptersRequest(run_id=run, adapters=specs))


def result(mid, t, s, rhos, step=0, task="code_o"):
    return pb.MatchResult(match_id=mid, teacher_id=t, student_id=s, task_type=task, step=step, rhos=rhos)


def ratings(league, run="r1", **kw) -> dict[str, pb.Rating]:
    return {r.adapter_id: r for r in league.GetRatings(pb.GetRatingsRequest(run_id=run, **kw)).ratings}


def test_migrations_upgrade_an_empty_database_and_downgrade_again(league_url):
    db = LeagueDB(league_url)
    try:
        assert not (_tables(db) & LEAGUE_TABLES)
        db.migrate()
        assert LEAGUE_TABLES <= _tables(db)
        assert "league_alembic_version" in _tables(db)
        db.migrate()  # at head already: nothing to do
        db.downgrade("base")
        assert not (_tables(db) & LEAGUE_TABLES)
        db.migrate()
        assert db.create_run("again")
    finally:
        db.close()


def test_postgres_tables_land_in_the_private_schema(pg_url):
    db = LeagueDB(pg_url)
    try:
        db.migrate()
        with db.engine.connect() as conn:
            schema = conn.execute(sa.text("select current_schema()")).scalar()
            names = set(conn.execute(sa.text("select table_name from information_schema.tables "
                                             "where table_schema = :s"), {"s": schema}).scalars())
        assert schema.startswith("t_")
        assert LEAGUE_TABLES | {"league_alembic_version"} <= names
    finally:
        db.close()


def test_register_is_idempotent_and_starts_at_the_default_rating(league):
    first = setup_run(league)
    assert len(first.ratings) == 5
    again = setup_run(league)
    assert [r.adapter_id for r in again.ratings] == [r.adapter_id for r in first.ratings]
    r = ratings(league)["T0"]
    assert (r.mu, r.sigma, r.status, r.matches) == (pytest.approx(25.0), pytest.approx(25.0 / 3), "active", 0)
    assert r.conservative_skill == pytest.approx(0.0)
    assert not league.CreateRun(pb.CreateRunRequest(run_id="r1")).created


def test_report_updates_ratings_like_trueskill_and_is_idempotent(league):
    setup_run(league)
    batch = [result("r1/0/T0/code_o", "T0", "S0", [1.0, 0.75]),   # student wins
             result("r1/0/T1/code_o", "T1", "S0", [0.0, 0.25]),   # teacher wins
             result("r1/0/T0/code_i", "T0", "S1", [0.5], task="code_i")]  # draw
    out = league.ReportMatches(pb.ReportMatchesRequest(run_id="r1", matches=batch))
    assert (out.applied, out.duplicates) == (3, 0)
    env = RatingParams().environment()
    t0, t1, s0, s1 = (env.create_rating() for _ in range(4))
    s0, t0 = trueskill.rate_1vs1(s0, t0, env=env)
    t1, s0 = trueskill.rate_1vs1(t1, s0, env=env)
    t0, s1 = trueskill.rate_1vs1(t0, s1, drawn=True, env=env)
    got = ratings(league)
    for name, ref in (("T0", t0), ("T1", t1), ("S0", s0), ("S1", s1)):
        assert got[name].mu == pytest.approx(ref.mu, abs=1e-9)
        assert got[name].sigma == pytest.approx(ref.sigma, abs=1e-9)
    assert (got["S0"].wins, got["S0"].losses, got["S0"].matches) == (1, 1, 2)
    assert (got["T0"].wins, got["T0"].losses, got["T0"].draws) == (0, 1, 1)
    assert {r.adapter_id for r in out.ratings} == {"T0", "T1", "S0", "S1"}
    again = league.ReportMatches(pb.ReportMatchesRequest(run_id="r1", matches=batch + batch[:1]))
    assert (again.applied, again.duplicates) == (0, 4)
    assert ratings(league) == got
    assert len(league.db.list_matches("r1")) == 3
    history = league.db.rating_history("S0")
    assert history[-1]["mu"] == pytest.approx(s0.mu) and history[-1]["matches"] == 2


INVALID_REPORTS = [
    (dict(rhos=[0.5, 1.5]), "matches[1].rhos[1]"),
    (dict(rhos=[-0.1]), "matches[1].rhos[0]"),
    (dict(rhos=[float("nan")]), "matches[1].rhos[0]"),
    (dict(rhos=[]), "matches[1].rhos"),
    (dict(student_id="T1"), "matches[1].student_id"),    # a teacher-teacher match
    (dict(teacher_id="S1"), "matches[1].teacher_id"),    # a student as teacher
    (dict(student_id="nobody"), "matches[1].student_id"),
    (dict(task_type="code_x"), "matches[1].task_type"),
    (dict(match_id=""), "matches[1].match_id"),
]


def test_invalid_reports_name_the_field_and_write_nothing(league):
    setup_run(league)
    before = ratings(league)
    good = result("r1/0/T0/code_o", "T0", "S0", [1.0])
    for mutate, field in INVALID_REPORTS:
        fields = dict(match_id="r1/0/T1/code_o", teacher_id="T1", student_id="S1", task_type="code_o", step=0,
                      rhos=[0.5])
        fields.update(mutate)
        with pytest.raises(ServiceError) as e:
            league.ReportMatches(pb.ReportMatchesRequest(run_id="r1", matches=[good, pb.MatchResult(**fields)]))
        assert e.value.code == StatusCode.INVALID_ARGUMENT
        assert field in e.value.message, (mutate, e.value.message)
        assert ratings(league) == before
        assert league.db.list_matches("r1") == []
        assert league.payoff_matrix("r1")["teachers"] == []


def test_unknown_run_is_not_found(league):
    with pytest.raises(ServiceError) as e:
        league.GetRatings(pb.GetRatingsRequest(run_id="missing"))
    assert e.value.code == StatusCode.NOT_FOUND
    with pytest.raises(ServiceError) as e:
        league.GetLineage(pb.GetLineageRequest(adapter_id="missing"))
    assert e.value.code == StatusCode.NOT_FOUND


def test_an_adapter_id_belongs_to_one_run(league):
    setup_run(league)
    league.CreateRun(pb.CreateRunRequest(run_id="r2"))
    with pytest.raises(ServiceError) as e:
        league.RegisterAdapters(pb.RegisterAdaptersRequest(
            run_id="r2", adapters=[pb.AdapterSpec(adapter_id="T0", role="teacher")]))
    assert e.value.code == StatusCode.ALREADY_EXISTS and "adapters[0].adapter_id" in e.value.message
    with pytest.raises(ServiceError) as e:
        league.RegisterAdapters(pb.RegisterAdaptersRequest(
            run_id="r2", adapters=[pb.AdapterSpec(adapter_id="X", role="judge")]))
    assert "adapters[0].role" in e.value.message


def test_matchmake_pairs_every_teacher_and_task_type_deterministically(league):
    setup_run(league)
    req = pb.MatchmakeRequest(run_id="r1", step=3, seed=11)
    first = league.Matchmake(req).pairings
    assert len(first) == 2 * 3
    assert {(p.teacher_id, p.task_type) for p in first} == {(t, tt) for t in ("T0", "T1")
                                                           for tt in ("code_i", "code_o", "code_f")}
    for p in first:
        assert p.match_id == f"r1/3/{p.teacher_id}/{p.task_type}"
        assert p.student_id in {"S0", "S1", "S2"}
        assert p.p_student == pytest.approx(1 / 3)  # equal ratings: PFSP is uniform
    assert list(league.Matchmake(req).pairings) == list(first)
    only = league.Matchmake(pb.MatchmakeRequest(run_id="r1", step=3, seed=11, task_types=["code_f"])).pairings
    assert {p.task_type for p in only} == {"code_f"}
    with pytest.raises(ServiceError) as e:
        league.Matchmake(pb.MatchmakeRequest(run_id="r1", step=3, task_types=["code_z"]))
    assert "task_types[0]" in e.value.message


def test_matchmake_does_not_depend_on_the_row_block(league, monkeypatch):
    import services.league.service as service_module

    setup_run(league, teachers=tuple(f"T{i}" for i in range(11)), students=tuple(f"S{i}" for i in range(9)))
    league.ReportMatches(pb.ReportMatchesRequest(run_id="r1", matches=[
        result(f"m{i}", f"T{i % 11}", f"S{i % 9}", [(i % 5) / 4], step=i) for i in range(60)]))
    req = pb.MatchmakeRequest(run_id="r1", step=5, seed=3)
    whole = list(league.Matchmake(req).pairings)
    monkeypatch.setattr(service_module, "ROW_BLOCK", 4)
    assert list(league.Matchmake(req).pairings) == whole
    assert len({p.student_id for p in whole}) > 1


def test_matchmake_probabilities_follow_pfsp(league):
    setup_run(league, teachers=("T0",), students=("S0", "S1"))
    # S0 beats T0 on every task: T0's win probability against S0 drops, against S1 stays 0.5.
    league.ReportMatches(pb.ReportMatchesRequest(run_id="r1", matches=[
        result(f"m{i}", "T0", "S0", [1.0], step=i) for i in range(6)]))
    r = ratings(league)
    env_beta = 25.0 / 6
    import math

    def x(t, s):
        d = math.sqrt(2 * env_beta ** 2 + t.sigma ** 2 + s.sigma ** 2)
        return 0.5 * math.erfc(-(t.mu - s.mu) / (d * math.sqrt(2)))

    w = [max(x(r["T0"], r[s]) * (1 - x(r["T0"], r[s])), 0.01) for s in ("S0", "S1")]
    counts = {"S0": 0, "S1": 0}
    for step in range(100):
        for p in league.Matchmake(pb.MatchmakeRequest(run_id="r1", step=step, task_types=["code_o"])).pairings:
            assert p.p_student == pytest.approx(w[int(p.student_id[1])] / sum(w), abs=1e-6)
            counts[p.student_id] += 1
    assert counts["S0"] / 100 == pytest.approx(w[0] / sum(w), abs=0.12)


def test_baseline_adapter_plays_itself_without_moving_its_rating(league):
    league.CreateRun(pb.CreateRunRequest(run_id="b", mode="baseline"))
    league.RegisterAdapters(pb.RegisterAdaptersRequest(run_id="b", adapters=[
        pb.AdapterSpec(adapter_id="B0", role="both")]))
    pairings = league.Matchmake(pb.MatchmakeRequest(run_id="b", step=0)).pairings
    assert [(p.teacher_id, p.student_id, p.p_student) for p in pairings] == [("B0", "B0", 1.0)] * 3
    out = league.ReportMatches(pb.ReportMatchesRequest(run_id="b", matches=[
        result(p.match_id, "B0", "B0", [1.0], task=p.task_type) for p in pairings]))
    assert out.applied == 3
    b0 = ratings(league, run="b")["B0"]
    assert (b0.mu, b0.sigma, b0.matches, b0.wins + b0.losses + b0.draws) == (25.0, pytest.approx(25.0 / 3), 3, 0)
    assert league.payoff_matrix("b")["solve_rate"] == [[1.0]]
    assert list(league.SelectForReplacement(pb.SelectForReplacementRequest(run_id="b", step=10)).replacements) == []


def test_population_teacher_never_plays_itself(league):
    setup_run(league, teachers=("T0",), students=())
    with pytest.raises(ServiceError) as e:
        league.Matchmake(pb.MatchmakeRequest(run_id="r1", step=0))
    assert e.value.code == StatusCode.FAILED_PRECONDITION


def test_selection_child_and_lineage(league):
    setup_run(league, teachers=("T0", "T1", "T2", "T3"), students=("S0", "S1", "S2", "S3"))
    # Student Si beats teacher Ti in i of 4 games: students S3 > S2 > S1 > S0, teachers T0 > T1 > T2 > T3.
    matches = []
    for step in range(4):
        for i in range(4):
            matches.append(result(f"m{step}-{i}", f"T{i}", f"S{i}", [1.0 if step < i else 0.0], step=step))
    league.ReportMatches(pb.ReportMatchesRequest(run_id="r1", matches=matches))
    plan = league.SelectForReplacement(pb.SelectForReplacementRequest(run_id="r1", step=10, seed=1)).replacements
    by_role = {p.role: p for p in plan}
    assert set(by_role) == {"teacher", "student"}
    assert by_role["student"].retire_id == "S0" and by_role["teacher"].retire_id == "T3"
    assert set(by_role["student"].parent_ids) == {"S3", "S2"}
    assert list(by_role["student"].parent_ids) == ["S3", "S2"]  # better first
    r = ratings(league)
    child = league.RecordChild(pb.RecordChildRequest(
        run_id="r1", child_id="S4", role="student", parent_ids=["S3", "S2"], operator="X1", params_json='{"p":0.7}',
        seed=5, step=10, retire_id="S0", rank=8)).child
    assert child.mu == pytest.approx((r["S3"].mu + r["S2"].mu) / 2)
    assert child.sigma == pytest.approx(25.0 / 3)
    assert (child.operator, list(child.parents), child.created_step) == ("X1", ["S3", "S2"], 10)
    # Recording the same child again (a resumed step) changes nothing.
    again = league.RecordChild(pb.RecordChildRequest(
        run_id="r1", child_id="S4", role="student", parent_ids=["S3", "S2"], operator="X1", step=10, retire_id="S0"))
    assert again.child == child
    assert "S0" not in ratings(league)
    assert ratings(league, include_retired=True)["S0"].status == "retired"
    league.RecordChild(pb.RecordChildRequest(run_id="r1", child_id="S5", role="student", parent_ids=["S4"],
                                             operator="M1", step=20, retire_id="S1"))
    lin = league.GetLineage(pb.GetLineageRequest(adapter_id="S5"))
    assert {(e.parent_id, e.child_id, e.operator, e.step) for e in lin.ancestors} == {
        ("S4", "S5", "M1", 20), ("S3", "S4", "X1", 10), ("S2", "S4", "X1", 10)}
    assert list(lin.descendants) == []
    down = league.GetLineage(pb.GetLineageRequest(adapter_id="S3"))
    assert {(e.parent_id, e.child_id) for e in down.descendants} == {("S3", "S4"), ("S4", "S5")}
    for bad, field in ((dict(parent_ids=["ghost"]), "parent_ids[0]"), (dict(retire_id="T0"), "retire_id"),
                       (dict(parent_ids=[]), "parent_ids"), (dict(role="coach"), "role")):
        fields = dict(run_id="r1", child_id="S9", role="student", parent_ids=["S3"], operator="M2", step=30)
        fields.update(bad)
        with pytest.raises(ServiceError) as e:
            league.RecordChild(pb.RecordChildRequest(**fields))
        assert e.value.code == StatusCode.INVALID_ARGUMENT and field in e.value.message
    assert "S9" not in ratings(league, include_retired=True)


def test_per_task_outcome_and_payoff(league_url):
    from services.league.engine import RatingRules
    from tests.league.conftest import make_service

    service = make_service(league_url, RatingRules(outcome="per_task", payoff_decay=0.5))
    try:
        setup_run(service, teachers=("T0",), students=("S0",))
        service.ReportMatches(pb.ReportMatchesRequest(run_id="r1", matches=[
            result("a", "T0", "S0", [1.0, 0.0, 0.5]), result("b", "T0", "S0", [1.0], step=1)]))
        s0 = ratings(service)["S0"]
        assert (s0.matches, s0.wins, s0.losses, s0.draws) == (2, 2, 1, 1)
        pay = service.payoff_matrix("r1")
        assert pay["teachers"] == ["T0"] and pay["students"] == ["S0"]
        assert pay["solve_rate"][0][0] == pytest.approx((0.5 * 0.5 + 1.0) / 1.5)
        assert pay["matches"] == [[2]]
    finally:
        service.close()
