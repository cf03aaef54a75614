"""Concurrent reporters on Postgres (row locks) and SQLite (one writer): no lost update, no double application."""

from __future__ import annotations

import random
import threading
from collections import defaultdict

import pytest
import trueskill

from populora.pb import league_pb2 as pb
from services.league.ratings import RatingParams
from tests.league.oracle import oracle_rate

N_REPORTERS = 8


def _register(league, teachers, students, run="r1"):
    league.CreateRun(pb.CreateRunRequest(run_id=run))
    league.RegisterAdapters(pb.RegisterAdaptersRequest(run_id=run, adapters=[
        *(pb.AdapterSpec(adapter_id=t, role="teacher") for t in teachers),
        *(pb.AdapterSpec(adapter_id=s, role="student") for s in students)]))


def _replay(matches, names) -> dict[str, trueskill.Rating]:
    """The oracle: the trueskill package itself, one match after another (aggregate rule, margin 0.05)."""
    env = RatingParams().environment()
    r = {n: env.create_rating() for n in names}
    for m in matches:
        oracle_rate(r, m.teacher_id, m.student_id, m.rhos, env)
    return r


def _run_reporters(jobs) -> list[BaseException]:
    """Start one thread per job at once; return what they raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(jobs))

    def wrap(job):
        try:
            barrier.wait()
            job()
        except BaseException as e:  # noqa: BLE001 - collected and re-raised by the test
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(j,)) for j in jobs]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors


def _rhos(rng: random.Random) -> list[float]:
    return [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]) for _ in range(2)]


@pytest.mark.slow
def test_eight_reporters_match_a_serial_replay_and_ignore_duplicates(league):
    """8 reporters x 500 matches; each reporter also re-sends its neighbour's batches at the same time, so every
    match arrives twice from two connections. Per pair the order is fixed, so the result must equal one serial
    replay, and exactly 4,000 matches apply."""
    teachers = [f"T{i}" for i in range(N_REPORTERS)]
    students = [f"S{i}" for i in range(N_REPORTERS)]
    _register(league, teachers, students)
    rng = random.Random(42)
    batches: list[list[pb.MatchResult]] = []  # per reporter: 10 batches of 50
    per_pair: dict[int, list[pb.MatchResult]] = {}
    for r in range(N_REPORTERS):
        ms = [pb.MatchResult(match_id=f"r1/{i}/T{r}/code_o", teacher_id=f"T{r}", student_id=f"S{r}",
                             task_type="code_o", step=i, rhos=_rhos(rng)) for i in range(500)]
        per_pair[r] = ms
        batches.append([ms[i:i + 50] for i in range(0, 500, 50)])
    totals = defaultdict(int)
    lock = threading.Lock()

    def reporter(r: int):
        def job():
            for own, neighbours in zip(batches[r], batches[(r + 1) % N_REPORTERS]):
                for batch in (own, neighbours):
                    out = league.ReportMatches(pb.ReportMatchesRequest(run_id="r1", matches=batch))
                    with lock:
                        totals["applied"] += out.applied
                        totals["duplicates"] += out.duplicates
        return job

    errors = _run_reporters([reporter(r) for r in range(N_REPORTERS)])
    assert not errors, errors[0]
    assert dict(totals) == {"applied": 4000, "duplicates": 4000}
    expected = _replay([m for r in range(N_REPORTERS) for m in per_pair[r]], teachers + students)
    got = {r.adapter_id: r for r in league.GetRatings(pb.GetRatingsRequest(run_id="r1")).ratings}
    for name in teachers + students:
        assert got[name].mu == pytest.approx(expected[name].mu, abs=1e-9), name
        assert got[name].sigma == pytest.approx(expected[name].sigma, abs=1e-9), name
        assert got[name].matches == 500
    # Sending everything once more changes nothing.
    out = league.ReportMatches(pb.ReportMatchesRequest(run_id="r1", matches=per_pair[0]))
    assert (out.applied, out.duplicates) == (0, 500)


@pytest.mark.slow
def test_reporters_sharing_adapters_lose_no_update(league):
    """8 reporters whose matches all touch the same 4 teachers and 4 students: the final ratings must equal a replay
    of the match log in the order the league applied it (a lost read-modify-write would break this)."""
    teachers = [f"T{i}" for i in range(4)]
    students = [f"S{i}" for i in range(4)]
    _register(league, teachers, students)
    rng = random.Random(5)
    work = [[pb.MatchResult(match_id=f"w{r}-{i}", teacher_id=rng.choice(teachers), student_id=rng.choice(students),
                            task_type="code_i", step=i, rhos=_rhos(rng)) for i in range(100)]
            for r in range(N_REPORTERS)]

    def reporter(r: int):
        def job():
            for i in range(0, 100, 10):
                league.ReportMatches(pb.ReportMatchesRequest(run_id="r1", matches=work[r][i:i + 10]))
        return job

    errors = _run_reporters([reporter(r) for r in range(N_REPORTERS)])
    assert not errors, errors[0]
    log = league.db.list_matches("r1", limit=10_000)
    assert len(log) == 800
    by_id = {m.match_id: m for ms in work for m in ms}
    expected = _replay([by_id[m["match_id"]] for m in log], teachers + students)
    got = {r.adapter_id: r for r in league.GetRatings(pb.GetRatingsRequest(run_id="r1")).ratings}
    played = defaultdict(int)
    for m in by_id.values():
        played[m.teacher_id] += 1
        played[m.student_id] += 1
    for name in teachers + students:
        assert got[name].matches == played[name]
        assert got[name].mu == pytest.approx(expected[name].mu, abs=1e-9), name
        assert got[name].sigma == pytest.approx(expected[name].sigma, abs=1e-9), name
