import os
import shutil
from pathlib import Path

import pytest

from tests.e2e.echo_model import E2E_LR, echo_model_dir

# Every process of an end-to-end run computes on one torch thread, the test's own and the services and runs it starts
# (they inherit this): runs compared bit for bit (weights digests) must round alike, and with more threads two phases
# that overlap in one process (spec 16) share the intra-op pool as their timing falls, which moves last bits.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """The test's own process on one torch thread too (tests/conftest.py)."""


@pytest.fixture(scope="session")
def echo_model():
    """A tiny model fitted to answer each of the runs' prompts with one of two answers of different rewards
    (see echo_model.py): every step has valid proposals, sandbox jobs and a learning signal."""
    return str(echo_model_dir())


def session_dir(tmp_path_factory) -> Path:
    """A directory of this test session's, shared by its pytest-xdist workers (each worker's own base temp is one of
    its subdirectories), for what the session makes once and every worker reads."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def heldout_overlap(tmp_path_factory, echo_model) -> Path:
    """The experiments' heldout_overlap.json (which held-out templates share behaviour with the warm start:
    coordinator/experiment/seedeval.py, `ensure_overlap`), made once per session for the end-to-end experiments: it
    depends on neither their runs nor their config (thousands of sandbox jobs, most of a minute), and an experiment
    that finds it in its directory reads it instead of making it again (as a resumed experiment does)."""
    from coordinator.experiment.evalfiles import OVERLAP_FILE
    from coordinator.experiment.plan import plan
    from coordinator.experiment.seedeval import ensure_overlap
    from populora.config import load_config
    from populora.models import atomic_dir

    def build(tmp: Path) -> None:
        over = [*e2e_overrides(tmp, echo_model), "run.budget_flops=1000000000000"]  # an experiment needs a budget
        exp = plan(load_config(preset="cpu-tiny", overrides=over, env=False), "overlap", [0], [])
        ensure_overlap(exp)
        shutil.copyfile(exp.out_dir / OVERLAP_FILE, tmp / OVERLAP_FILE)

    # one worker makes it, the other waits for it (populora.models.atomic_dir's lock)
    return atomic_dir(session_dir(tmp_path_factory) / "heldout-overlap", build) / OVERLAP_FILE


def with_overlap(exp, overlap: Path) -> None:
    """Put the session's heldout_overlap.json (the `heldout_overlap` fixture) in the experiment's directory."""
    from coordinator.experiment.evalfiles import OVERLAP_FILE

    exp.out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(overlap, exp.out_dir / OVERLAP_FILE)


def e2e_overrides(tmp_path, model: str) -> list[str]:
    """cpu-tiny, shrunk to what exercises every phase quickly; the model writes ~60-token proposals (four
    code_f inputs). No references
    in teacher prompts, so the runs' prompts are the echo model's fitted ones; four proposals a teacher and two
    samples a task, so an adapter's group of rollouts holds both of its two answers with high probability (each
    drawn about half the time: a group of four is uniform with probability 1/8, all six teacher groups of a step
    with probability 4e-6). The runs train at E2E_LR, at which the updates move the answers' odds by hundredths
    (tests/e2e/test_echo_model.py), so every step has valid proposals and a learning signal whatever the
    machine."""
    return [f"model.name={model}", f"run.output_dir={tmp_path / 'runs'}", f"store.root={tmp_path / 'store'}",
            f"league.db_url=sqlite:///{tmp_path / 'league.sqlite'}", "generation.max_new_tokens=120",
            "tasks.proposals_per_teacher=4", "tasks.n_samples=2", "tasks.n_references=0", "tasks.code_f_inputs=4",
            "tasks.seed_buffer_size=2",
            "tasks.seed_max_rounds=1", "evolution.every_k=2", f"trainer.lr={E2E_LR}",
            # lock-step, whatever the mode's default (distributed overlaps): the golden records and the runs compared
            # with them are lock-step; a test of overlap sets loop.max_staleness=1 after these
            "loop.max_staleness=0"]
