"""Cache builds across processes: two processes asking for the same cached directory build it once; the second
waits for the first and takes its result; a build that fails leaves nothing behind and does not hold the lock."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import pytest

from populora.models import atomic_dir


def _ask(final: str, log: str, go) -> None:
    def build(tmp: Path) -> None:
        with open(log, "a") as fh:
            fh.write("built\n")
        time.sleep(0.5)  # long enough that the other process asks while this one builds
        (tmp / "payload").write_text("ok")

    go.wait()
    atomic_dir(Path(final), build)


def test_two_processes_build_once_and_both_see_the_result(tmp_path):
    final, log = tmp_path / "cache" / "thing", tmp_path / "builds.log"
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    procs = [ctx.Process(target=_ask, args=(str(final), str(log), go)) for _ in range(2)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert log.read_text().splitlines() == ["built"]
    assert (final / "payload").read_text() == "ok"
    assert [p.name for p in final.parent.iterdir() if not p.name.endswith(".lock")] == ["thing"]  # no temp dir left


def test_a_failed_build_leaves_nothing_and_releases_the_lock(tmp_path):
    final = tmp_path / "cache" / "thing"

    def broken(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_dir(final, broken)
    assert not final.exists()
    assert [p.name for p in final.parent.iterdir() if not p.name.endswith(".lock")] == []
    atomic_dir(final, lambda tmp: (tmp / "payload").write_text("ok"))  # the lock was released: this does not hang
    assert (final / "payload").read_text() == "ok"
