"""The league benchmark's dashboard workload: a run of 64 members whose steps are stored as `populora train` stores
them (each phase's typed record through the coordinator's journal, then the step's phases, problems and summary
through RecordPhases, RecordStepProblems and RecordStepSummary), its matches and evolutions, and dashboards that
refresh in a loop while steps go on."""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import random
import statistics
import time

from bench.league_server import BENCH_TOKEN, LeagueProcess, cpu_ms_per_request
from bench.loadgen import http_get, load, percentile, run_async
from populora.config import CODE_TASK_TYPES as TASK_TYPES  # the default mix: a run of the code types

DASH_RUN = "dash"
DASH_CONFIG = "run: {steps: 1000, mode: population}\nevolution: {every_k: 13}\n"
PROGRAM = "def f(xs):\n    total = 0\n    for x in xs:\n        total += x * x\n    return total"


def synthetic_step(step: int, teachers: list[str], students: list[str], rng: random.Random, events=()):
    """A training step's records (coordinator.run.step.StepRecord), sized like a small population's step: one proposal
    per teacher and task type (about 400 characters, 120 tokens), half of them valid, two answers each; `events`
    (populora.records.EvolutionEvent) make it a step that evolved."""
    from coordinator.run.step import StepRecord
    from populora import records as r
    from populora.tasks import BufferSet, Triplet

    pairings = [r.Pairing(f"{DASH_RUN}/{step}/{t}/{tt}", t, rng.choice(students), tt, 0.03)
                for t in teachers for tt in TASK_TYPES]
    proposals, verdicts, attempts, outcomes, rho = [], {}, [], {}, {}
    for p in pairings:
        pid = p.match_id + "/p0"
        proposals.append(r.Proposal(pid, p.task_type, p.teacher, p.match_id, step,
                                    "<think>" + "x" * 300 + "</think><answer>...</answer>", list(range(300)),
                                    list(range(120))))
        valid = rng.random() < 0.5
        task = Triplet(p.task_type, PROGRAM, ["[1, 2, 3]"] * 5, ["14"] * 5, "sum of squares",
                       complexity={"ast_depth": 6, "cyclomatic": 2, "lines_of_code": 5}) if valid else None
        verdicts[pid] = r.Verdict(valid, "ok" if valid else "no_answer", "", task)
        if valid:
            for k in range(2):
                attempts.append(r.Attempt(f"{pid}/a{k}", pid, p.student, p.match_id, "<answer>14</answer>",
                                          list(range(200)), list(range(40))))
                outcomes[f"{pid}/a{k}"] = rng.choice(("correct", "wrong"))
            rho[pid] = sum(outcomes[f"{pid}/a{k}"] == "correct" for k in range(2)) / 2
    population = {a: r.Member("teacher" if a in teachers else "student", step) for a in teachers + students}
    usage = {a: r.Usage(generated_tokens=120, trained_tokens=500) for a in population}
    return StepRecord(
        r.Matched(pairings), r.Proposed(proposals), r.Validated(verdicts, BufferSet(1)), r.Solved(attempts),
        r.Checked(outcomes, rho), r.Rated(len(pairings), 0, [p.match_id for p in pairings], {}), step,
        r.Updated(population, {a: r.UpdateStats(loss=0.1, tokens=500) for a in population}),
        r.Evolved(population, list(events)) if events else None,
        r.Accounted(usage, sum(usage.values(), r.Usage()) + r.Usage(sandbox_jobs=len(attempts))))


def store_step(state, league, cfg, run_id: str, record, seconds: float = 0.1) -> None:
    """Store a step as `populora train` does: each phase's record in the coordinator's journal (`state`, a
    JournalDB), then in the league the step's phases, its problems and its summary (its metrics row, as
    coordinator.record.stepmetrics computes it)."""
    from coordinator.record.stepmetrics import step_metrics
    from coordinator.record.stepproblems import record_step_problems
    from coordinator.record.stepsummary import record_step_summary, step_summary
    from coordinator.run.journal import Journal
    from coordinator.run.runprogress import RunProgress

    progress = RunProgress(league, state, run_id)
    j = Journal(state, run_id)
    phases = {"match": record.matched, "propose": record.proposed, "validate": record.validated,
              "solve": record.solved, "check": record.checked, "rate": record.rated, "update": record.updated,
              "evolve": record.evolved, "account": record.spent}
    for phase, result in phases.items():
        if result is not None:
            j.put(record.step, phase, result, seconds)
    row = step_metrics(cfg, record, j.seconds(record.step))
    progress.step(record.step)
    record_step_problems(league, run_id, record)
    record_step_summary(league, run_id, step_summary(record, row, state.phase_rows(run_id, record.step)))


def report_step(client, record, rng: random.Random) -> int:
    """The step's matches, reported over gRPC; the number applied."""
    from populora.pb import league_pb2 as pb

    return client.ReportMatches(pb.ReportMatchesRequest(run_id=DASH_RUN, matches=[pb.MatchResult(
        match_id=p.match_id, teacher_id=p.teacher, student_id=p.student, task_type=p.task_type, step=record.step,
        rhos=[rng.random()]) for p in record.matched.pairings])).applied


def dashboard_steps(url: str, grpc_address: str, teachers: list[str], students: list[str], first_step: int,
                    rate: float, seconds: float, done) -> None:
    """Child process: a run going on: step after step, stored (journal and summary) and its matches reported
    (gRPC), paced at `rate` matches/s; puts the matches/s achieved on `done`."""
    from coordinator.run.journal import JournalDB
    from populora.config import Config
    from populora.rpc import connect

    state, cfg = JournalDB(url), Config()
    client = connect("league", grpc_address, BENCH_TOKEN, timeout=60)
    rng = random.Random(first_step)
    step, applied = first_step, 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        record = synthetic_step(step, teachers, students, rng)
        store_step(state, client, cfg, DASH_RUN, record)
        applied += report_step(client, record, rng)
        step += 1
        time.sleep(max(0.0, start + applied / rate - time.monotonic()))
    done.put(applied / (time.monotonic() - start))
    client.close()
    state.close()


def evolve(client, step: int, teachers: list[str], students: list[str], rng: random.Random) -> list:
    """A quarter of each role replaced by a child of two survivors (lineage recorded); the evolution events."""
    from populora.pb import league_pb2 as pb
    from populora.records import EvolutionEvent

    events = []
    for members, role in ((teachers, "teacher"), (students, "student")):
        for k in range(len(members) // 8):
            retire = members.pop(rng.randrange(len(members)))
            parents = rng.sample(members, 2)
            child = f"{retire[:2]}{step}c{k}"
            client.RecordChild(pb.RecordChildRequest(
                run_id=DASH_RUN, child_id=child, role=role, parent_ids=parents, operator="X1", step=step,
                retire_id=retire, params_json=json.dumps({"epsilon": 0.1 * rng.random()})))
            members.append(child)
            events.append(EvolutionEvent(step, role, retire, child, parents, "X1", 0.1, 0.0))
    return events


def build_dashboard_run(client, url: str, n_adapters: int, n_matches: int) -> tuple[list[str], list[str], int]:
    """The dashboard's run: n/2 teachers and n/2 students, 8 evolutions (a quarter of each role replaced by a child
    each time), `n_matches` matches in steps of one per teacher and task type, every step stored as a run stores
    it. Returns the members at the end and the next step."""
    from coordinator.run.journal import JournalDB
    from coordinator.run.runprogress import RunProgress
    from populora.config import Config
    from populora.pb import league_pb2 as pb

    half = n_adapters // 2
    teachers = [f"dT{i:02d}" for i in range(half)]
    students = [f"dS{i:02d}" for i in range(n_adapters - half)]
    client.CreateRun(pb.CreateRunRequest(run_id=DASH_RUN, mode="population", config_yaml=DASH_CONFIG))
    client.RegisterAdapters(pb.RegisterAdaptersRequest(run_id=DASH_RUN, adapters=[
        *(pb.AdapterSpec(adapter_id=t, role="teacher") for t in teachers),
        *(pb.AdapterSpec(adapter_id=s, role="student") for s in students)]))
    state, cfg = JournalDB(url), Config()
    state.create_run(DASH_RUN, "population", DASH_CONFIG)
    RunProgress(client, state, DASH_RUN).status("running")
    rng = random.Random(1)
    steps = max(1, n_matches // (len(teachers) * len(TASK_TYPES)))
    every = max(1, steps // 8)
    for step in range(1, steps + 1):
        events = evolve(client, step, teachers, students, rng) if step % every == 0 else []
        record = synthetic_step(step, teachers, students, rng, events)
        report_step(client, record, rng)
        store_step(state, client, cfg, DASH_RUN, record)
    state.close()
    return teachers, students, steps + 1


def dashboard_paths(run_id: str) -> list[str]:
    """The JSON calls of one dashboard refresh (every view's data; static files are cached by the browser)."""
    return [f"/v1/runs/{run_id}/{p}" for p in ("overview", "steps", "leaderboard", "ratings", "lineage", "payoff")]


def bench_dashboard(url: str, teachers: list[str], students: list[str], next_step: int, clients: int,
                    seconds: float, rate: float, read_cache_s: float) -> dict:
    with LeagueProcess(url, read_cache_s) as league:
        paths = dashboard_paths(DASH_RUN)
        run_async(load(league.rest_port, paths, clients, 2.0))  # warm-up (the journal's steps parsed once)
        cpu_ms = cpu_ms_per_request(league, paths, clients, min(seconds, 3.0))
        ctx = mp.get_context("spawn")
        done = ctx.Queue()
        writer = ctx.Process(target=dashboard_steps, daemon=True, args=(
            url, f"127.0.0.1:{league.grpc_port}", teachers, students, next_step, rate, seconds + 2, done))
        writer.start()
        time.sleep(0.5)
        by_path = run_async(_load_by_path(league.rest_port, paths, clients, seconds))
        achieved = done.get(timeout=120)
        writer.join(30)
    every = [x for lat in by_path.values() for x in lat]
    return {"p99_ms": round(percentile(every, 99), 2), "p50_ms": round(statistics.median(every), 2),
            "calls": len(every), "write_rate": round(achieved, 1), "cpu_ms": cpu_ms,
            "by_endpoint_p99_ms": {p.rsplit("/", 1)[1]: round(percentile(lat, 99), 2) for p, lat in by_path.items()}}


async def _load_by_path(port: int, paths: list[str], clients: int, seconds: float) -> dict[str, list[float]]:
    """`clients` dashboards, each refreshing in a loop: the calls of one refresh in turn, one at a time."""
    by_path: dict[str, list[float]] = {p: [] for p in paths}

    async def dashboard() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        end = time.perf_counter() + seconds
        try:
            while time.perf_counter() < end:
                for path in paths:
                    start = time.perf_counter()
                    await http_get(reader, writer, path)
                    by_path[path].append((time.perf_counter() - start) * 1000)
        finally:
            writer.close()

    await asyncio.gather(*(dashboard() for _ in range(clients)))
    return by_path
