"""Every CLI flag that names a run (or a child) refuses an id that breaks the one rule of ids (populora/names.py)
before it loads a model or creates anything: exit 2, a message naming the flag and the rule, no directory anywhere
(`--run-id ../escape_test` used to load the model and make a directory beside the output directory)."""

from __future__ import annotations

import time

import pytest

from coordinator.cli import main
from coordinator.run import worker
from populora import names

HOSTILE = ["../escape_test", "a/b", "..", ".", "é", "a b", "-x", ".hidden", "r" * 101]


@pytest.fixture
def nothing_loaded(monkeypatch):
    """Fails the test if a model is loaded or services are opened."""
    import coordinator.clients.services
    import populora.models

    def forbidden(*_a, **_k):
        raise AssertionError("loaded a model or opened services before checking the id")

    monkeypatch.setattr(coordinator.clients.services, "open_services", forbidden)
    monkeypatch.setattr(populora.models, "load_from_config", forbidden)


def _refused(capsys, argv: list[str], flag: str, root) -> str:
    start = time.monotonic()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"error: {flag}") and names.RULE in err and "Traceback" not in err, err
    assert time.monotonic() - start < 10, "refused, but not before the slow work"
    assert sorted(p.name for p in root.rglob("*")) == [], "created something"
    return err


@pytest.mark.parametrize("bad", HOSTILE, ids=[ascii(b)[:16] for b in HOSTILE])
def test_train_refuses_a_hostile_run_id_before_anything(tmp_path, capsys, nothing_loaded, bad):
    root = tmp_path / "work"
    root.mkdir()
    out = root / "runs"
    common = ["--preset", "cpu-tiny", "--set", f"run.output_dir={out}"]
    _refused(capsys, ["train", f"--run-id={bad}", *common], "--run-id", root)  # `=`: "-x" is a value here
    _refused(capsys, ["train", "--resume", f"--run-id={bad}", "--dashboard", "0", *common], "--run-id", root)
    code = main(["train", *common, "--set", f"run.run_id={bad}"])  # the config's field: the same rule
    err = capsys.readouterr().err
    assert code == 2 and "run.run_id" in err and names.RULE in err, err
    assert sorted(p.name for p in root.rglob("*")) == []


@pytest.mark.parametrize("bad", ["../escape_test", "a/b", "é"])
def test_eval_dashboard_and_report_refuse_a_hostile_run(tmp_path, capsys, nothing_loaded, bad):
    root = tmp_path / "work"
    root.mkdir()
    common = ["--preset", "cpu-tiny", "--set", f"run.output_dir={root / 'runs'}"]
    _refused(capsys, ["eval", "--run", bad, *common], "--run", root)
    _refused(capsys, ["dashboard", "--run", bad, "--port", "0", *common], "--run", root)
    code = main(["report", bad, "--output-dir", str(root / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and "nor a run id" in err and names.RULE in err, err
    code = main(["report", "no-such-run", "--output-dir", str(root / "runs")])  # a valid id: looked up as before
    assert code == 2 and "expected a metrics.jsonl" in capsys.readouterr().err


def test_evolve_refuses_a_child_directory_whose_name_is_no_id(tmp_path, capsys):
    for out in (tmp_path / "a" / "..", tmp_path / "kid é"):
        code = main(["evolve", "--operator", "M1", "--parents", str(tmp_path / "p"), "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error: --out") and names.RULE in err, err
    assert list(tmp_path.iterdir()) == []


def test_worker_refuses_a_hostile_run_id(tmp_path, capsys):
    db = tmp_path / "journal.sqlite"
    assert worker.main(["--run-id", "../x", "--db-url", f"sqlite:///{db}", "--wait-s", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --run-id '../x': ")
    assert not db.exists()


def test_experiment_refuses_an_id_whose_arm_run_ids_break_the_rule(tmp_path, capsys, nothing_loaded):
    root = tmp_path / "work"
    root.mkdir()
    code = main(["experiment", "--preset", "cpu-tiny", "--set", f"run.output_dir={root / 'runs'}",
                 "--budget", "tokens=1000", "--id", "e" * 90])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: --id '{'e' * 90}'") and "at most 100" in err, err
    assert sorted(p.name for p in root.rglob("*")) == []
