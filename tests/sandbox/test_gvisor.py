"""The gvisor backend on this machine's runsc (ptrace platform): one long-lived gVisor sandbox per worker hosting
the zygote, the in-gVisor isolation profile checked at start-up, and the same guarantees as the other jails: the
hostile corpus contained, no reward hack rewarded, the container's capabilities exactly the deployment's."""

from __future__ import annotations

import os
import signal

import pytest

from populora.config import TasksConfig
from populora.tasks import check_answers
from populora.tasks.jobs import Job
from services.sandbox.jail import CONTAINER_CAPABILITIES, ZYGOTE_CAPABILITIES
from tests.sandbox.conftest import gvisor_or_skip
from tests.sandbox.hostile_corpus import run_corpus
from tests.sandbox.reward_hack_corpus import judge_hacks, load_hacks, static_rules_bypassed
from tests.sandbox.test_gold_isolation import _walker_attempt

# bit numbers of linux/capability.h
CAPABILITY_BITS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5,
                   "SETGID": 6, "SETUID": 7, "SETPCAP": 8, "NET_BIND_SERVICE": 10, "NET_ADMIN": 12, "NET_RAW": 13,
                   "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_ADMIN": 21, "MKNOD": 27, "AUDIT_WRITE": 29,
                   "SETFCAP": 31}


def test_one_sandbox_per_worker_with_its_layers_checked(gvisor):
    layers = gvisor.isolation()
    assert layers[0].startswith("gVisor runsc sandbox per worker")
    checked = " ".join(layers)
    for promise in ("own uid per worker (checked", "fork refused", "socket, execve, kill refused",
                    "private job directory (checked", "root not writable (checked"):
        assert promise in checked, promise
    # every job runs in one of the worker's long-lived sandboxes: the same kernel answers jobs one after another
    got = gvisor.run([Job(str(i), "import os\ndef f():\n    return os.uname().release", calls=["f()"])
                      for i in range(6)])
    assert len({r.values[0] for r in got}) == 1 and all(r.status == "ok" for r in got)
    assert "runsc" in " ".join(gvisor._workers[0].launch.cmd)


def test_the_zygotes_capabilities_are_its_own(gvisor):
    """The zygote (pid 1 of its sandbox) holds exactly jail.ZYGOTE_CAPABILITIES: the deployment files grant
    these plus SYS_CHROOT (CONTAINER_CAPABILITIES), for the chroot that the gvisor backend's sandboxes do not
    need (the deployed profile's own test below runs with exactly CONTAINER_CAPABILITIES)."""
    prog = ("def f():\n"
            "    caps = {}\n"
            "    for line in open('/proc/1/status'):\n"
            "        key, _, value = line.partition(':')\n"
            "        if key in ('CapBnd', 'CapEff', 'CapPrm'):\n"
            "            caps[key] = int(value, 16)\n"
            "    return caps\n")
    [r] = gvisor.run([Job("caps", prog, calls=["f()"])])
    assert r.status == "ok", r.error
    want = sum(1 << CAPABILITY_BITS[c] for c in ZYGOTE_CAPABILITIES)
    assert r.values[0] == {"CapBnd": want, "CapEff": want, "CapPrm": want}


@pytest.mark.slow
def test_the_hostile_corpus_is_contained_in_gvisor(gvisor):
    total, wrong = run_corpus(gvisor.run, gvisor=True)
    assert total >= 60 and not wrong, "\n".join(wrong)
    normal = gvisor.run([Job(f"n{i}", "def f(a):\n    return [a, a * a]", calls=[f"f({i})"]) for i in range(20)])
    assert [r.values for r in normal] == [[[i, i * i]] for i in range(20)]


@pytest.mark.slow
def test_no_reward_hack_is_rewarded_in_gvisor(gvisor):
    verdicts = judge_hacks(load_hacks(), TasksConfig(timeout_s=1.0), gvisor.run)
    assert len(verdicts) >= 60
    earned = [f"{v.name}: {v.outcome} {v.detail[:160]}" for v in verdicts if not v.blocked]
    assert not earned, "\n".join(earned)


def test_the_walker_is_wrong_in_gvisor(gvisor):
    with static_rules_bypassed():
        [c] = check_answers([_walker_attempt()], TasksConfig(timeout_s=3.0), gvisor.run)
    assert c.outcome == "wrong", c.detail


def test_no_network_even_without_the_filter(monkeypatch):
    """With seccomp off, a job in the gVisor sandbox can make a socket but reaches nothing: runsc --network=none
    gives it a loopback of its own, so the host's Postgres on 127.0.0.1:5432 is not there. (Without the filter
    the start-up check would refuse the worker, since System V IPC then crosses jobs: it is skipped here.)"""
    from services.sandbox import zygote_worker
    from services.sandbox.executor import Limits

    monkeypatch.setattr(zygote_worker.ZygoteWorker, "_check_state", lambda self: [])
    ex = gvisor_or_skip(limits=Limits(timeout_s=5.0), workers=1, seccomp=False)
    try:
        prog = ("import socket\n"
                "def f():\n"
                "    s = socket.socket()\n"
                "    s.settimeout(2)\n"
                "    try:\n"
                "        s.connect(('127.0.0.1', 5432))\n"
                "        return 'connected'\n"
                "    except OSError as e:\n"
                "        return type(e).__name__\n"
                "def g():\n"
                "    return sorted(n for _, n in socket.if_nameindex())\n")
        [r] = ex.run([Job("net", prog, calls=["f()", "g()"])])
        assert r.status == "ok", r.error
        assert r.values[0] != "connected" and r.values[1] == ["lo"]
    finally:
        ex.close()


def test_a_dead_gvisor_sandbox_is_replaced(gvisor):
    victim = gvisor._workers[0]
    os.killpg(victim.proc.pid, signal.SIGKILL)
    gvisor.run([Job(str(i), "", calls=[f"{i} + 1"]) for i in range(8)])
    again = gvisor.run([Job(str(i), "", calls=[f"{i} + 1"]) for i in range(8)])
    assert [r.values for r in again] == [[i + 1] for i in range(8)]
    assert all(w.proc.poll() is None for w in gvisor._workers)


# Run inside a gVisor container configured as the deployment files configure the sandbox's: root with exactly the
# container capabilities, no_new_privs, a read-only root holding a system's files (/etc/passwd among them),
# world-writable /tmp and /home/populora (the worst case: the files give mode 755), the token in the environment.
# The service's own ZygoteExecutor(isolation="gvisor") runs there.
IN_CONTAINER = r'''
import json, sys
sys.path.insert(0, PROJECT)
from populora.config import TasksConfig
from populora.tasks.jobs import Job
from services.sandbox.executor import Limits
from services.sandbox.zygote import ZygoteExecutor
from tests.sandbox.hostile_corpus import run_corpus
from tests.sandbox.reward_hack_corpus import judge_hacks, load_hacks
ex = ZygoteExecutor(Limits(timeout_s=2.0), workers=2, isolation="gvisor")
total, wrong = run_corpus(ex.run, profile="container", check_repeats=2)
hacks = [v.name for v in judge_hacks(load_hacks(), TasksConfig(timeout_s=1.0), ex.run) if not v.blocked]
hunt = """
import os
def f(token):
    found = []
    for pid in os.listdir('/proc'):
        for what in ('environ', 'cmdline', 'status'):
            try:
                if token in open('/proc/%s/%s' % (pid, what), 'rb').read():
                    found.append(pid + '/' + what)
            except OSError:
                pass
    return found
"""
[r] = ex.run([Job("hunt", hunt, calls=["f(b'hunter2-' + b'secret')"])])
# no state crosses jobs on one worker (the container shares its IPC and network namespaces with every worker)
from tests.sandbox.cross_job_corpus import not_contained, run_pairs
one = ZygoteExecutor(Limits(timeout_s=5.0), workers=1, isolation="gvisor")
cross = not_contained(run_pairs(one.run))
one.close()
# a zygote killed with its process group leaves its fork server and children to pid 1, this service
import os, signal, time
os.killpg(ex._workers[0].proc.pid, signal.SIGKILL)
after = ex.run([Job(str(i), "", calls=[str(i)]) for i in range(6)])
time.sleep(3)
zombies = [p for p in os.listdir("/proc")
           if p.isdigit() and open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()[0] == "Z"]
# what a job sees of the container: its root, /etc and /proc
view = ex.run([Job("view", "import os\ndef f():\n    return [sorted(os.listdir(d)) for d in ('/', '/etc', '/proc')]",
                   calls=["f()"])])[0]
seen_here = [sorted(os.listdir(d)) for d in ("/etc", "/proc")]
print(json.dumps({"isolation": ex.isolation(), "total": total, "wrong": wrong, "hacks_earned": hacks,
                  "view": view.values, "here": seen_here,
                  "token_found": r.values, "hunt": r.status, "cross": cross, "pid": os.getpid(), "zombies": zombies,
                  "after_restart": [x.status for x in after]}))
ex.close()
'''


@pytest.mark.slow
def test_the_deployed_profile_inside_a_gvisor_container(tmp_path):
    """sandbox.isolation=gvisor, the profile the Kubernetes and Compose files ship, run by the service itself in
    a gVisor container set up like theirs: every start-up check passes, the hostile corpus is contained (every
    program, /etc/passwd and the container's processes included: each zygote chroots into the runtime root), no
    reward hack is rewarded, no state crosses jobs (the cross-job corpus), and no job finds the service's token in
    any process's environment."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from services.sandbox.gvisor import oci_config, runsc_available, write_bundle
    from services.sandbox.jail import Interpreter, system_tree
    from tests.conftest import sandbox_or_skip

    sandbox_or_skip(runsc_available(), lambda: None)
    project = str(Path(__file__).resolve().parents[2])
    tree = Interpreter.current().tree
    binds = [b for b in system_tree()[0] if not b[1].startswith("/sandbox")] + [(tree, tree), (project, project),
                                                                                ("/etc", "/etc")]
    venv_python = str(Path(sys.executable).absolute())
    if not venv_python.startswith((project + "/", tree + "/")):
        binds.append((sys.prefix, sys.prefix))  # a virtual environment outside the checkout
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/populora", "LANG": "C.UTF-8", "POPULORA_TOKEN": "hunter2-secret"}
    script = f"PROJECT = {project!r}\n" + IN_CONTAINER
    write_bundle(str(tmp_path / "bundle"), oci_config(256, args=[venv_python, "-c", script], binds=binds, env=env,
                                                      tmp_mode="1777", tmpfs=("/home/populora",),
                                                      capabilities=CONTAINER_CAPABILITIES))
    out = subprocess.run(["runsc", "--root", str(tmp_path / "state"), "--network=none", "--platform=ptrace",
                          "--ignore-cgroups", "run", "--bundle", str(tmp_path / "bundle"), f"deployed-{tmp_path.name}"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    checked = " ".join(got["isolation"])
    for promise in ("fork refused", "socket, execve, kill refused", "no other process's environment readable",
                    "no place shared between jobs", "own root of the runtime only (checked"):
        assert promise in checked, promise
    assert got["wrong"] == [] and got["total"] >= 60
    assert got["cross"] == [], got["cross"]
    # the container has a system's /etc and its processes in /proc; a job sees neither
    assert "passwd" in got["here"][0] and len(got["here"][1]) > 3
    root, etc, proc = got["view"][0]
    assert etc == ["ld.so.cache"] and proc == [] and "tmp" in root and "app" not in root
    assert got["hacks_earned"] == [] and got["hunt"] == "ok" and got["token_found"] == [[]]
    # the service is pid 1, as in the deployment files, and leaves no zombie behind a replaced zygote
    assert got["pid"] == 1 and got["zombies"] == [] and got["after_restart"].count("ok") >= 3
