"""`populora train` and `populora experiment` refuse bad limits before they create anything: exit 2 with a message
naming the flag, no traceback, no run database or run directory left behind."""

from __future__ import annotations

import pytest

from coordinator.cli import main


@pytest.mark.parametrize("argv", [
    ["train", "--steps", "-1"],
    ["train", "--resume", "--run-id", "r1", "--steps", "-3"],
    ["train", "--resume", "--run-id", "r1", "--budget", "tokens=-5"],
    ["experiment", "--steps", "-2", "--budget", "tokens=1000"],
    ["train", "--run-id", "a\tb"],
    ["train", "--resume", "--run-id", "r\x13"],
], ids=["steps", "resume-steps", "resume-budget", "experiment-steps", "run-id-tab", "resume-run-id-U+0013"])
def test_a_bad_limit_exits_2_and_creates_nothing(tmp_path, capsys, argv):
    out_dir = tmp_path / "runs"
    code = main([*argv, "--preset", "cpu-tiny", "--set", f"run.output_dir={out_dir}"])
    err = capsys.readouterr().err
    assert code == 2, err
    flag = "--budget" if "tokens=-5" in argv else "--run-id" if "--steps" not in argv else "--steps"
    assert err.startswith(f"error: {flag} ") and "Traceback" not in err, err
    if flag == "--steps":
        assert "greater than or equal to 0" in err and "run.steps" in err, err
    if flag == "--run-id":
        assert "holds the control character U+00" in err and "run.run_id" in err, err
    assert not out_dir.exists(), sorted(p.name for p in out_dir.rglob("*"))
