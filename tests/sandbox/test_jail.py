"""The jail's tree reveals nothing of the host's layout: the interpreter is at /sandbox/python and the runtime at
/sandbox/jail_runtime.py in every jail (bubblewrap, unshare, gVisor), so nothing a job can list, read from its
interpreter or from /proc names where the host keeps them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from populora.tasks.jobs import Job
from services.sandbox.jail import RUNTIME, Interpreter
from tests.conftest import zygote_or_skip

LOOK = '''
import os, sys
def f():
    seen = {"executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix,
            "exec_prefix": sys.exec_prefix, "path": sys.path, "cwd": os.getcwd(), "environ": dict(os.environ),
            "root": sorted(os.listdir("/")), "sandbox": sorted(os.listdir("/sandbox"))}
    for name in ("/proc/self/maps", "/proc/self/cmdline", "/proc/1/cmdline", "/proc/self/mountinfo"):
        try:
            with open(name, "rb") as r:
                seen[name] = r.read().decode("latin-1")
        except OSError as e:
            seen[name] = type(e).__name__
    import pathlib, json, textwrap  # not preloaded: the jail's stdlib is readable by the job's uid
    seen["imported"] = pathlib.PurePosixPath("/a/b").name
    return seen
'''


def _host_names() -> list[str]:
    """Paths of this host that a job must not learn: the interpreter's tree and its parents below /, and the
    project's directory."""
    tree = Interpreter.current().tree
    names = [tree, str(RUNTIME.parent), str(Path(RUNTIME).parents[2])]
    names += [str(p) for p in Path(tree).parents if str(p) not in ("/", "/usr")]
    return names


def _assert_neutral(seen: dict, check_mountinfo: bool) -> None:
    assert seen["executable"].startswith("/sandbox/python/") and seen["prefix"] == "/sandbox/python"
    assert seen["imported"] == "b"
    assert seen["sandbox"] == ["jail_runtime.py", "python"]
    assert set(seen["root"]) <= {"usr", "bin", "sbin", "lib", "lib64", "lib32", "sandbox", "tmp", "proc", "dev",
                                 "etc", "sys"}, seen["root"]
    places = dict(seen)
    if not check_mountinfo:
        places.pop("/proc/self/mountinfo")  # bind mounts list their source there (docs/sandbox.md)
    text = repr(places)
    for name in _host_names():
        assert name not in text, f"{name!r} is visible in the jail: {text[:2000]}"


@pytest.mark.parametrize("isolation", ["bwrap", "unshare"])
def test_the_interpreter_lives_at_a_neutral_path(isolation):
    ex = zygote_or_skip(workers=1, isolation=isolation)
    try:
        [r] = ex.run([Job("look", LOOK, calls=["f()"])])
        assert r.status == "ok", (r.error, r.stdout)
        _assert_neutral(r.values[0], check_mountinfo=False)
        [r] = ex.run([Job("host", "", calls=[f"__import__('os').path.exists({p!r})" for p in _host_names()])])
        assert r.values == [False] * len(_host_names())
    finally:
        ex.close()


def test_the_interpreter_lives_at_a_neutral_path_in_gvisor(gvisor):
    [r] = gvisor.run([Job("look", LOOK, calls=["f()"])])
    assert r.status == "ok", (r.error, r.stdout)
    _assert_neutral(r.values[0], check_mountinfo=True)


def test_host_names_are_what_the_test_thinks():
    """The names looked for are real host paths (the test would pass vacuously otherwise)."""
    assert all(os.path.exists(p) for p in _host_names())
    assert os.path.realpath(sys.base_prefix) in _host_names()


def test_blank_environ_block_hides_the_environment_and_keeps_it():
    """After blank_environ_block, /proc/<pid>/environ shows nothing, while the process (os.environ, getenv) and
    its children still have every variable."""
    import subprocess

    script = ("import os, subprocess\n"
              "from services.sandbox.jail import blank_environ_block\n"
              "blank_environ_block()\n"
              "shown = open('/proc/self/environ', 'rb').read().strip(bytes(1))\n"
              "child = subprocess.run(['/usr/bin/env'], capture_output=True, text=True).stdout\n"
              "print(len(shown), os.environ['SECRET_SETTING'], 'SECRET_SETTING=s3' in child)\n")
    env = {**os.environ, "SECRET_SETTING": "s3"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60,
                         cwd=str(Path(RUNTIME).parents[2]))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "s3", "True"]


def test_the_unshare_root_is_staged_outside_every_bind_source(tmp_path):
    from services.sandbox.jail import stage_dir

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert stage_dir(["/usr/lib"], (str(a), str(b))) == str(a)
    assert stage_dir([str(a / "checkout" / "jail_runtime.py")], (str(a), str(b))) == str(b)  # a checkout under a
    with pytest.raises(RuntimeError, match="outside the jail's sources"):
        stage_dir([str(a / "x"), str(b / "y")], (str(a), str(b), str(tmp_path / "missing")))
