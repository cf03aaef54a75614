import pytest

from tests.e2e.echo_model import E2E_LR, echo_model_dir


@pytest.fixture(scope="session")
def echo_model():
    """A tiny model fitted to answer every prompt with one valid AZR proposal (see echo_model.py)."""
    return str(echo_model_dir())


def e2e_overrides(tmp_path, model: str) -> list[str]:
    """cpu-tiny, shrunk to what exercises every phase quickly; the model writes ~110-token proposals. The runs train
    at E2E_LR, at which no update changes the echo model's answer (tests/e2e/test_echo_model.py), so every step
    has valid proposals whatever the machine."""
    return [f"model.name={model}", f"run.output_dir={tmp_path / 'runs'}", f"store.root={tmp_path / 'store'}",
            f"league.db_url=sqlite:///{tmp_path / 'league.sqlite'}", "generation.max_new_tokens=120",
            "tasks.proposals_per_teacher=1", "tasks.n_samples=2", "tasks.seed_buffer_size=2",
            "tasks.seed_max_rounds=1", "evolution.every_k=2", f"trainer.lr={E2E_LR}",
            # lock-step, whatever the mode's default (distributed overlaps): the golden records and the runs compared
            # with them are lock-step; a test of overlap sets loop.max_staleness=1 after these
            "loop.max_staleness=0"]
