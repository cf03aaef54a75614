"""The hostile corpus: every program gets exactly its expected status, nothing escapes (no 'ESCAPED' on any
output), and afterwards the same pool serves 100 normal jobs correctly with no process left over."""

from __future__ import annotations

import re
from pathlib import Path

import psutil
import pytest

from populora.tasks.jobs import Job

HOSTILE = Path(__file__).with_name("hostile")


def load_corpus() -> list[dict]:
    out = []
    for path in sorted(HOSTILE.glob("*.py")):
        text = path.read_text()
        meta = dict(re.findall(r"^# (expect|timeout_s|phase): (\S+)$", text, re.M))
        out.append({"name": path.stem, "program": text, "expect": meta["expect"],
                    "timeout_s": float(meta.get("timeout_s", 0)), "phase": int(meta.get("phase", 0))})
    return out


def test_corpus_is_large_and_covers_the_threats():
    corpus = load_corpus()
    assert len(corpus) >= 60
    names = " ".join(c["name"] for c in corpus)
    for threat in ("fork_bomb", "memory_bomb", "infinite_loop", "sleep_past_deadline", "sigterm_ignored",
                   "huge_stdout", "deep_recursion", "thread_spawn", "os_system", "subprocess", "multiprocessing",
                   "execve", "socket_tcp_redis", "socket_tcp_postgres", "socket_udp", "socket_dns",
                   "read_etc_shadow", "read_environment", "read_proc1", "write_usr", "fill_tmp",
                   "ctypes_segfault", "os_kill_parent", "fd_exhaustion", "state_file", "state_module"):
        assert threat in names, threat


def _uids_in_use(uids: set[int]) -> list[psutil.Process]:
    left = []
    for p in psutil.process_iter(["uids"]):
        try:
            if p.info["uids"] and p.info["uids"].real in uids:
                left.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return left


@pytest.mark.slow
def test_hostile_corpus_is_contained(zygote):
    corpus = load_corpus()
    main = [c for c in corpus if c["phase"] != 2]
    checks = [c for c in corpus if c["phase"] == 2]
    results = zygote.run([Job(c["name"], c["program"], timeout_s=c["timeout_s"] or 5.0) for c in main])
    # the state checks run on every worker after the writers, several times each
    writers = [c for c in main if c["phase"] == 1]
    zygote.run([Job(c["name"], c["program"], timeout_s=5.0) for c in writers for _ in range(4)])
    check_results = zygote.run([Job(c["name"], c["program"], timeout_s=5.0) for c in checks for _ in range(4)])
    wrong = []
    for c, r in zip(main + [c for c in checks for _ in range(4)], results + check_results):
        if r.status != c["expect"] or "ESCAPED" in r.stdout:
            wrong.append(f"{c['name']}: expected {c['expect']}, got {r.status} ({r.error[:120]}) {r.stdout[:80]!r}")
    assert not wrong, "\n".join(wrong)

    normal = zygote.run([Job(f"n{i}", "def f(a, b):\n    return sorted([a, b, a * b])", calls=[f"f({i}, 3)"])
                         for i in range(100)])
    assert [r.status for r in normal] == ["ok"] * 100
    assert [r.values[0] for r in normal] == [sorted([i, 3, 3 * i]) for i in range(100)]
    uids = {w.uid for w in zygote._workers}
    assert not _uids_in_use(uids), "a job's process outlived its job"
