"""Every service process starts through the command line (`populora serve NAME`): building it must not load torch,
which the league and the sandbox never use (it was most of their start-up time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_command_line_is_built_without_torch():
    loaded = _modules_after("from coordinator.cli import build_parser\nbuild_parser()")
    assert "torch" not in loaded and "transformers" not in loaded
    assert "coordinator.experiment.evaluate" not in loaded


def test_the_league_and_sandbox_servers_load_without_torch():
    loaded = _modules_after("import coordinator.clients.services, services.league.service, services.league.rest, "
                            "services.sandbox.service, services.sandbox.rest")
    assert "torch" not in loaded, sorted(m for m in loaded if m.startswith(("populora", "services", "coordinator")))


def test_the_eval_protocols_offered_are_the_harness_protocols():
    from coordinator.experiment.evalargs import EVAL_PROTOCOLS
    from populora.evals.prompts import PROTOCOLS

    assert EVAL_PROTOCOLS == PROTOCOLS
