"""The runtime root of sandbox.isolation=gvisor (the profile of a sandbox service in a container of its own): what
jail.build_runtime_root writes, and that a zygote chrooted into it leaves its jobs no file of the machine and no
process to see, with every start-up check passing. Runs on the plain host as root (chroot works the same there);
tests/sandbox/test_gvisor.py runs the same profile inside gVisor with the deployment's capabilities."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from populora.tasks.jobs import Job
from services.sandbox.executor import Limits, SandboxUnavailable
from services.sandbox.jail import CONTAINER_CAPABILITIES, build_runtime_root
from tests.conftest import missing
from tests.sandbox.hostile_corpus import load_corpus, run_corpus


def _root_or_skip() -> None:
    if os.geteuid() != 0:
        missing("the chroot of the runtime root needs root")


def test_the_runtime_root_holds_the_interpreter_and_nothing_else(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    held = build_runtime_root(str(root))
    stdlib = os.path.dirname(os.__file__)
    assert stdlib in held["dirs"] and held["objects"] > 3
    assert (root / stdlib.lstrip("/") / "os.py").is_file()
    assert (root / os.path.realpath(sys.executable).lstrip("/")).is_file()
    # shared objects the extension modules need, under the names the loader looks them up by
    import _ctypes

    assert (root / _ctypes.__file__.lstrip("/")).is_file()
    assert sorted(p.name for p in (root / "etc").iterdir()) == (["ld.so.cache"] if os.path.exists("/etc/ld.so.cache")
                                                                else [])
    assert list((root / "proc").iterdir()) == [] and list((root / "tmp").iterdir()) == []
    assert (root.stat().st_mode & 0o777) == 0o755 and (root / "tmp").stat().st_mode & 0o777 == 0o755
    names = {p.name for p in root.rglob("*")}
    assert not names & {"site-packages", "dist-packages", "passwd", "shadow", "hosts"}
    assert "app" not in names and os.path.basename(os.getcwd()) not in {p.name for p in root.iterdir()}


def test_chroot_needs_no_capability_beyond_the_containers(tmp_path):
    """With the bounding set cut to exactly CONTAINER_CAPABILITIES (what the deployment files grant), the
    profile starts, its checks pass and jobs see the runtime root only; without SYS_CHROOT it refuses to start,
    saying which capability is missing."""
    _root_or_skip()
    if not shutil.which("setpriv"):
        missing("cutting the bounding set needs setpriv (Debian's util-linux)")
    script = tmp_path / "chroot.py"
    script.write_text(
        "import json, sys\n"
        "from populora.tasks.jobs import Job\n"
        "from services.sandbox.executor import Limits, SandboxUnavailable\n"
        "from services.sandbox.zygote import ZygoteExecutor\n"
        "try:\n"
        "    z = ZygoteExecutor(Limits(timeout_s=2.0), workers=1, isolation='gvisor')\n"
        "except SandboxUnavailable as e:\n"
        "    print(json.dumps({'refused': str(e)}))\n"
        "    sys.exit(0)\n"
        "prog = 'import os\\ndef f():\\n    return [sorted(os.listdir(d)) for d in (\"/etc\", \"/proc\")]'\n"
        "jobs = [Job('view', prog, calls=['f()']), Job('passwd', 'open(\"/etc/passwd\").read()')]\n"
        "print(json.dumps({'got': [[r.status, r.values] for r in z.run(jobs)], 'layers': z.isolation()}))\n"
        "z.close()\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}

    def run(caps: tuple[str, ...]) -> dict:
        bounding = ",".join(f"+{c.lower()}" for c in caps)
        out = subprocess.run(["setpriv", f"--bounding-set=-all,{bounding}", sys.executable, str(script)],
                             capture_output=True, text=True, timeout=300, cwd=os.getcwd(), env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.splitlines()[-1])

    granted = run(CONTAINER_CAPABILITIES)
    etc = ["ld.so.cache"] if os.path.exists("/etc/ld.so.cache") else []
    assert granted.get("got") == [["ok", [[etc, []]]], ["error", []]], granted
    assert any("own root of the runtime only (checked" in layer for layer in granted["layers"])
    refused = run(tuple(c for c in CONTAINER_CAPABILITIES if c != "SYS_CHROOT"))
    assert "SYS_CHROOT" in refused.get("refused", ""), refused


@pytest.mark.slow
def test_the_hostile_corpus_is_contained_in_the_runtime_root():
    """The container profile's expectations on the plain host: every program contained, /etc/passwd and the
    process list included. fill_tmp is the exception: here it writes to the host's disk, not the container's
    size-capped tmpfs, so whether it ends by its time limit or finishes its 1,000 MB depends on the disk's speed
    (make test-compose checks it in the container, where the tmpfs stops it)."""
    _root_or_skip()
    from services.sandbox.zygote import ZygoteExecutor

    ex = ZygoteExecutor(Limits(timeout_s=2.0), workers=2, isolation="gvisor")
    root = ex.runtime_root
    try:
        total, wrong = run_corpus(ex.run, profile="container", check_repeats=2)
        wrong = [w for w in wrong if not w.startswith(("fill_tmp: expected error, got timeout",
                                                        "fill_tmp: expected error, got ok"))]
        assert total >= 60 and not wrong, "\n".join(wrong)
        normal = ex.run([Job(f"n{i}", "import json, decimal\ndef f(a):\n    return json.loads(json.dumps([a]))",
                             calls=[f"f({i})"]) for i in range(10)])
        assert [r.values for r in normal] == [[[i]] for i in range(10)]
    finally:
        ex.close()
    assert root and not os.path.exists(root), "the runtime root is removed with the executor"


def test_corpus_expectations_per_profile():
    corpus = {c.name: c for c in load_corpus()}
    environ = corpus["read_proc1_environ"]
    assert (environ.expect, environ.expect_gvisor, environ.expect_container) == ("error", "ok", "error")
    # without its own line, the container profile expects what gVisor does
    pids = corpus["proc_host_pids"]
    assert pids.expect_container == pids.expect_gvisor == "ok"


def test_an_unknown_profile_runs_nothing():
    ran = []
    with pytest.raises(ValueError, match="unknown profile 'k8s'"):
        run_corpus(lambda jobs: ran.append(jobs) or [], profile="k8s")
    assert ran == []


def test_a_root_that_cannot_be_listed_is_refused(tmp_path, monkeypatch):
    """The runtime's own interpreter must tell what it loads; when it cannot, the sandbox does not start."""
    from services.sandbox import jail

    monkeypatch.setattr(jail, "python_command", lambda: [sys.executable, "-c", "raise SystemExit(3)", "--"])
    with pytest.raises(SandboxUnavailable, match="cannot list what the jobs' interpreter needs"):
        build_runtime_root(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_tree_deeper_than_path_max_is_removed(tmp_path, monkeypatch):
    """What state_deep_tree_write leaves (2,500 levels, a path over PATH_MAX) goes with its job directory, a link
    in it is removed, never followed, and the removal says it is at work all the way."""
    from services.sandbox.jail_runtime import remove_tree

    top = tmp_path / "job1"
    top.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("x")
    fd = os.open(top, os.O_RDONLY)
    for _ in range(2500):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.symlink(str(outside), "link", dir_fd=fd)
    os.close(fd)
    # the host hears from the zygote between any two removals, on the way back up too (where the 2,500 levels
    # are removed): a step that is slow (gVisor under load) never makes a silence of many steps
    events: list[str] = []
    rmdir = os.rmdir
    monkeypatch.setattr(os, "rmdir", lambda *a, **k: (events.append("rmdir"), rmdir(*a, **k))[1])
    remove_tree(str(top), beat=lambda count: events.append("beat"))
    assert not top.exists() and (outside / "kept").read_text() == "x"
    assert events.count("rmdir") >= 2501  # each level tried on the way down (not empty yet), removed on the way up
    assert "rmdir,rmdir" not in ",".join(events)


def test_removing_a_tree_lists_each_entry_once(tmp_path, monkeypatch):
    """Linear in what a job left: 1,000 subdirectories (each with a file) of one directory are listed once each,
    not once per subdirectory removed (which made 4,000 of them take 16 s and failed the jobs queued behind)."""
    from services.sandbox.jail_runtime import remove_tree

    top = tmp_path / "job1"
    top.mkdir()
    for i in range(1000):
        (top / f"d{i}").mkdir()
        (top / f"d{i}" / "f").write_text("x")
    listed = [0]
    scandir = os.scandir

    def counting(fd):
        entries = list(scandir(fd))
        listed[0] += len(entries)

        class Listing:
            def __enter__(self):
                return iter(entries)

            def __exit__(self, *exc):
                return False

        return Listing()

    monkeypatch.setattr(os, "scandir", counting)
    assert remove_tree(str(top)) == 2000
    assert listed[0] == 2000 and not top.exists()
