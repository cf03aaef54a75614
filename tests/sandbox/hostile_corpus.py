"""The hostile corpus (tests/sandbox/hostile): programs that try to escape, starve or outlive the sandbox, each
with the status it must get (`# expect:`; `# expect-gvisor:` where gVisor's kernel answers differently, see the
file; `# expect-container:` where the profile of a sandbox service in a gVisor container, whose zygotes chroot
into the runtime root, answers differently again, else the gVisor one). Shared by the tests and by
`bench.sandbox`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from populora.tasks.jobs import Job

HOSTILE = Path(__file__).with_name("hostile")


@dataclass
class Hostile:
    name: str
    program: str
    expect: str
    expect_gvisor: str
    expect_container: str
    timeout_s: float
    phase: int  # 1: writes state; 2: checks no state leaked (runs after the writers)


def load_corpus() -> list[Hostile]:
    out = []
    for path in sorted(HOSTILE.glob("*.py")):
        text = path.read_text()
        meta = dict(re.findall(r"^# (expect|expect-gvisor|expect-container|timeout_s|phase): (\S+)$", text, re.M))
        gvisor = meta.get("expect-gvisor", meta["expect"])
        out.append(Hostile(path.stem, text, meta["expect"], gvisor, meta.get("expect-container", gvisor),
                           float(meta.get("timeout_s", 0)), int(meta.get("phase", 0))))
    return out


PROFILES = ("linux", "gvisor", "container")


def run_corpus(run, gvisor: bool = False, check_repeats: int = 4, profile: str = "") -> tuple[int, list[str]]:
    """Run the whole corpus through `run` (an executor's run): the writers and the rest first, then the writers
    again `check_repeats` times (so every worker holds their leftovers, if any), then each state check
    `check_repeats` times. `profile` picks the expectations: linux (bubblewrap, unshare), gvisor (the gvisor
    backend's sandboxes; `gvisor=True` says the same) or container (sandbox.isolation=gvisor in a container of
    its own). Returns (programs run, one line per program that was not contained)."""
    profile = profile or ("gvisor" if gvisor else "linux")
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; allowed: {PROFILES}")
    corpus = load_corpus()
    main = [c for c in corpus if c.phase != 2]
    checks = [c for c in corpus if c.phase == 2 for _ in range(check_repeats)]
    results = run([Job(c.name, c.program, timeout_s=c.timeout_s or 5.0) for c in main])
    run([Job(c.name, c.program, timeout_s=5.0) for c in main if c.phase == 1 for _ in range(check_repeats)])
    results += run([Job(c.name, c.program, timeout_s=5.0) for c in checks])
    wrong = []
    for c, r in zip(main + checks, results):
        expect = {"linux": c.expect, "gvisor": c.expect_gvisor, "container": c.expect_container}[profile]
        if r.status != expect or "ESCAPED" in r.stdout:
            wrong.append(f"{c.name}: expected {expect}, got {r.status} ({r.error[:120]}) {r.stdout[:80]!r}")
    return len(main) + len(checks), wrong
