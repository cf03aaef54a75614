"""The hostile corpus: every program gets exactly its expected status, nothing escapes (no 'ESCAPED' on any
output), and afterwards the same pool serves 100 normal jobs correctly with no process left over."""

from __future__ import annotations

import psutil
import pytest

from populora.tasks.jobs import Job
from tests.sandbox.hostile_corpus import load_corpus, run_corpus


def test_corpus_is_large_and_covers_the_threats():
    corpus = load_corpus()
    assert len(corpus) >= 60
    names = " ".join(c.name for c in corpus)
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
    total, wrong = run_corpus(zygote.run)
    assert total >= 60 and not wrong, "\n".join(wrong)

    normal = zygote.run([Job(f"n{i}", "def f(a, b):\n    return sorted([a, b, a * b])", calls=[f"f({i}, 3)"])
                         for i in range(100)])
    assert [r.status for r in normal] == ["ok"] * 100
    assert [r.values[0] for r in normal] == [sorted([i, 3, 3 * i]) for i in range(100)]
    uids = {w.uid for w in zygote._workers}
    assert not _uids_in_use(uids), "a job's process outlived its job"
