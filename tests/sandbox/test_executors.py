"""Executors and the result channel: frame parsing, exact-type decoding, statuses, the subprocess backend,
replacement of a dead zygote, the circuit breaker."""

from __future__ import annotations

import json
import os
import shutil
import signal

import pytest

from populora.config import SandboxConfig
from populora.tasks.jobs import Job
from services.sandbox.backends import make_executor
from services.sandbox.codec import FrameError, decode_value, parse_frame
from services.sandbox.executor import SandboxUnavailable
from services.sandbox.external import CircuitBreaker
from services.sandbox.jail_runtime import MAGIC, encode
from services.sandbox.seccomp import jail_filter, no_fork_filter
from services.sandbox.subprocess_backend import SubprocessExecutor
from services.sandbox.verdict import classify

NONCE = b"n" * 16


def frame(payload: bytes, nonce: bytes = NONCE) -> bytes:
    return MAGIC + nonce + b"%012d" % len(payload) + payload


def test_encode_decode_round_trip_exact_types():
    value = {1: [2.5, -0.0, (3, "s\udc80é"), {4, 5}], "b": frozenset({b"\x00"}), None: (True, 1 + 2j), 10**400: []}
    back = decode_value(json.loads(encode(value)))
    assert back == value and repr(back) == repr(value)
    assert type(decode_value(json.loads(encode(True)))) is bool


@pytest.mark.parametrize("bad", [type("I", (int,), {})(1), type("S", (str,), {})("x"), object(), print,
                                 [type("F", (float,), {})(1.0)], {1: type("L", (list,), {})()}])
def test_encode_refuses_anything_but_exact_plain_types(bad):
    with pytest.raises(TypeError):
        encode(bad)


def test_encode_refuses_cycles_and_depth():
    a: list = []
    a.append(a)
    with pytest.raises(TypeError):
        encode(a)
    deep: list = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(TypeError):
        encode(deep)


def test_parse_frame_accepts_exactly_one_frame_with_the_nonce():
    ok = b'{"status":"ok","values":[["i","0x2a"]],"error":""}'
    assert parse_frame(frame(ok), NONCE)["values"] == [42]
    for bad, why in [(b"", "without"), (frame(ok) + frame(ok), "more than one"), (frame(ok)[:-3], "truncated"),
                     (frame(ok, b"x" * 16), "nonce"), (b"junk" + frame(ok), "does not start"),
                     (frame(b'{"status":"ok"}'), "malformed"), (frame(b'{"status":"yes","values":[],"error":""}'),
                                                                 "unknown status"),
                     (frame(b'{"status":"ok","values":[["q",1]],"error":""}'), "malformed")]:
        with pytest.raises(FrameError, match=why):
            parse_frame(bad, NONCE)


def test_classify_maps_raw_facts_to_statuses():
    job = Job("j", "")
    ok = frame(b'{"status":"ok","values":[["s","6869"]],"error":""}')
    assert classify(job, {"exit": 0, "result": ok}, NONCE).values == ["hi"]
    assert classify(job, {"exit": 0, "result": ok, "timed_out": True}, NONCE).status == "timeout"
    assert classify(job, {"exit": 0, "output_exceeded": True}, NONCE).status == "output_limit"
    assert classify(job, {"exit": -signal.SIGXCPU}, NONCE).status == "timeout"
    assert classify(job, {"exit": -signal.SIGSEGV}, NONCE).status == "killed"
    assert classify(job, {"exit": 120, "stdout": "setuid failed"}, NONCE).status == "sandbox_error"
    exited = classify(job, {"exit": 0, "result": b""}, NONCE)  # os._exit before the epilogue: the program's failure
    assert (exited.status, exited.error.split(":")[0]) == ("error", "SystemExit")
    assert classify(job, {"exit": 3, "result": ok}, NONCE).status == "sandbox_error"
    err = frame(b'{"status":"error","values":[],"error":"' + b"ValueError: x".hex().encode() + b'"}')
    r = classify(job, {"exit": 0, "result": err}, NONCE)
    assert (r.status, r.error) == ("error", "ValueError: x")


def test_seccomp_filters_compile_to_bpf():
    for bpf in (jail_filter(), jail_filter(deny_signals=False), no_fork_filter()):
        assert len(bpf) % 8 == 0 and len(bpf) > 8 * 4
    assert len(jail_filter()) > 8 * 20 and jail_filter() != jail_filter(deny_signals=False)


def test_the_zygote_itself_runs_under_the_filter(zygote):
    """The filter is loaded once, on the zygote, before it forks its fork server: jobs inherit it, and the
    zygote, which reads model-written job messages, cannot open sockets or exec either; nor can the fork server
    or the child it keeps forked ahead."""
    import psutil

    zygote.run([Job("warm", "", calls=["1"])])
    found = 0
    for w in zygote._workers:
        for p in psutil.Process(w.proc.pid).children(recursive=True):
            if "python" not in p.name():  # bwrap's own processes carry the same command line
                continue
            status = dict(line.split(":", 1) for line in open(f"/proc/{p.pid}/status").read().splitlines())
            assert status["Seccomp"].strip() == "2" and status["NoNewPrivs"].strip() == "1"
            found += 1
    assert found >= 2 * len(zygote._workers)  # at least each zygote and its fork server
    [r] = zygote.run([Job("sc", "def f():\n    return [l for l in open('/proc/self/status') if 'Seccomp:' in l]",
                          calls=["f()"])])
    assert r.status == "ok" and r.values[0][0].split() == ["Seccomp:", "2"]


def test_the_zygote_needs_no_capability_beyond_the_containers(tmp_path):
    """On a plain host the bwrap jail needs root with only BWRAP_CAPABILITIES (every other one dropped): with the
    bounding set cut to exactly those, bwrap must still start, and jobs must run and stay contained."""
    if os.geteuid() != 0 or not shutil.which("bwrap") or not shutil.which("setpriv"):
        from tests.conftest import IN_CI

        (pytest.fail if IN_CI else pytest.skip)("needs root, bubblewrap and setpriv (util-linux)")
    from services.sandbox.jail import BWRAP_CAPABILITIES

    script = tmp_path / "caps.py"
    script.write_text(
        "import json\n"
        "from populora.tasks.jobs import Job\n"
        "from services.sandbox.executor import Limits\n"
        "from services.sandbox.zygote import ZygoteExecutor\n"
        "z = ZygoteExecutor(Limits(timeout_s=2.0), workers=2, isolation='bwrap')\n"
        "jobs = [Job('ok', 'def f(a):\\n    return a * 2', calls=['f(21)']),\n"
        "        Job('net', 'import socket\\nsocket.socket()'),\n"
        "        Job('fork', 'import os\\nos.fork()'),\n"
        "        Job('root', 'import os\\nos.setuid(0)'),\n"
        "        Job('loop', 'while True: pass', timeout_s=0.5)]\n"
        "print(json.dumps([[r.status, r.values] for r in z.run(jobs)]))\n"
        "z.close()\n")
    caps = ",".join(f"+{c.lower()}" for c in BWRAP_CAPABILITIES)
    import subprocess
    import sys

    out = subprocess.run(["setpriv", f"--bounding-set=-all,{caps}", sys.executable, str(script)],
                         capture_output=True, text=True, timeout=120, cwd=os.getcwd())
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == [["ok", [42]], ["error", []], ["error", []], ["error", []],
                                                       ["timeout", []]]


def test_subprocess_backend_statuses():
    ex = SubprocessExecutor(workers=2)
    jobs = [Job("ok", "def f(a):\n    print('out')\n    return [a]", calls=["f(1)"]),
            Job("err", "raise KeyError('k')"), Job("mem", "x = ' ' * 10**10"),
            Job("loop", "while True: pass", timeout_s=0.5), Job("big", "print('x' * 10**6)"),
            Job("exit", "import os\nos._exit(0)")]
    got = {r.job_id: r for r in ex.run(jobs)}
    assert (got["ok"].status, got["ok"].values, got["ok"].stdout) == ("ok", [[1]], "out\n")
    assert (got["err"].status, got["err"].error) == ("error", "KeyError: 'k'")
    assert [got[k].status for k in ("mem", "loop", "big", "exit")] == ["memory", "timeout", "output_limit",
                                                                       "error"]  # os._exit: the program's failure
    assert "fresh process per job" in ex.isolation()


def test_a_dead_zygote_is_replaced(zygote):
    victim = zygote._workers[0]
    os.killpg(victim.proc.pid, signal.SIGKILL)
    results = zygote.run([Job(str(i), "", calls=[f"{i} * 2"]) for i in range(20)])
    failed = [r for r in results if r.status != "ok"]
    # only the job the zygote was running when it died fails; those queued behind it run on a fresh one
    assert len(failed) <= 1 and all(r.status == "sandbox_error" for r in failed)
    again = zygote.run([Job(str(i), "", calls=[f"{i} * 2"]) for i in range(20)])
    assert [r.values for r in again] == [[2 * i] for i in range(20)]
    assert all(w.proc.poll() is None for w in zygote._workers)


def test_the_zygote_backend_refuses_a_process_limit_that_would_let_jobs_fork():
    from services.sandbox.executor import Limits
    from services.sandbox.zygote import ZygoteExecutor

    with pytest.raises(ValueError, match="nproc"):
        ZygoteExecutor(Limits(nproc=2), workers=1)


def test_make_executor_and_unavailable_backends():
    ex = make_executor(SandboxConfig(backend="subprocess", workers=1))
    assert isinstance(ex, SubprocessExecutor)
    if shutil.which("runsc") is None:
        with pytest.raises(SandboxUnavailable, match="runsc"):
            make_executor(SandboxConfig(backend="gvisor"))


def test_circuit_breaker_opens_and_half_opens():
    b = CircuitBreaker(failures=2, reset_s=10)
    assert b.allow(0) and b.state == "closed"
    b.record(False, 0)
    assert b.allow(1)
    b.record(False, 1)
    assert b.state == "open" and not b.allow(5)
    assert b.allow(12) and not b.allow(12.5)  # one call through after reset_s
    b.record(True, 13)
    assert b.state == "closed" and b.allow(13)


@pytest.mark.slow
def test_unshare_fallback_isolates_too():
    from tests.conftest import zygote_or_skip

    ex = zygote_or_skip(workers=1, isolation="unshare")
    try:
        got = ex.run([Job("ok", "", calls=["sorted({3, 1})"]), Job("sock", "import socket\nsocket.socket()"),
                      Job("usr", "open('/usr/evil', 'w')"), Job("tmp", "open('/tmp/evil', 'w')"),
                      Job("exec", "import os\nos.execv('/bin/true', ['true'])")])
        assert got[0].values == [[1, 3]] and "unshare" in ex.isolation()[0]
        assert [r.status for r in got[1:]] == ["error"] * 4
        # the hostile corpus is contained in this mode too (the state checks run after their writers)
        from tests.sandbox.hostile_corpus import run_corpus

        total, wrong = run_corpus(ex.run)
        assert total >= 60 and not wrong, "\n".join(wrong)
    finally:
        ex.close()


def test_values_the_host_cannot_print_are_errors_not_crashes(zygote):
    got = zygote.run([Job("big", "", calls=["10 ** 5000"]), Job("after", "", calls=["1"])])
    assert (got[0].status, got[0].error.startswith("UnsupportedOutput")) == ("error", True)
    assert got[1].values == [1]


BURN = "def f():\n    t = 0\n    for i in range(3_000_000):\n        t += i * i\n    return t"


@pytest.mark.parametrize("backend", ["subprocess", "zygote", "gvisor"])
def test_every_backend_reports_the_cpu_time_a_job_used(backend, request):
    """The kernel's count (wait4) of the job's user + system time, not the wall clock: a loop that computes uses
    tenths of a second, a job that sleeps uses almost none of the time it takes, and a timed-out loop is charged
    about its limit. The service sums it per request (compute accounting, spec 14)."""
    ex = SubprocessExecutor(workers=2) if backend == "subprocess" else request.getfixturevalue(backend)
    got = {r.job_id: r for r in ex.run([Job("burn", BURN, calls=["f()"]),
                                        Job("sleep", "import time\ntime.sleep(0.4)"),
                                        Job("loop", "while True: pass", timeout_s=1.0)])}
    assert got["burn"].status == "ok" and got["burn"].cpu_seconds > 0.05
    assert got["sleep"].status == "ok" and got["sleep"].cpu_seconds < got["sleep"].seconds / 2
    assert got["loop"].status == "timeout" and got["loop"].cpu_seconds > 0.3
    if backend == "subprocess":
        ex.close()


def test_a_sandbox_response_carries_the_cpu_time_of_its_jobs(zygote):
    from populora.config import load_config
    from populora.pb import sandbox_pb2
    from services.sandbox.service import SandboxService

    cfg = load_config(preset="cpu-tiny", env=False)
    svc = SandboxService(zygote, cfg.tasks, cfg.sandbox)
    out = svc.Execute(sandbox_pb2.ExecuteRequest(jobs=[sandbox_pb2.ExecJob(job_id="b", program=BURN, call="f()")]))
    assert out.results[0].status == "ok" and out.results[0].cpu_seconds > 0.05
