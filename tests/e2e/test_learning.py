"""It learns: a short seeded run of the whole loop on the echo model's task family, in which the echo model's
students answer each task right about half the time and its teachers write a valid task about half the time
(tests/e2e/echo_model.py), trained at LEARN_LR. The students' solve rate rises, and every member's own stored
weights moved towards the rewarded answers: the students' odds of the right answer, the teachers' of a valid task.

This is the test that a sign flipped in the advantage, a learning rate that does not reach the optimizer, or updates
that miss their members would fail (the rate falls or stays where it was)."""

from __future__ import annotations

import copy
from collections import Counter

import torch

from populora.models import load_base_model
from populora.store import ArtifactStore
from tests.e2e.echo_model import LEARN_LR, fork_probabilities
from tests.e2e.records import seeded_run

STEPS = 3  # two updates between the first step's games and the last's
MARGIN = 0.15  # the students' solve rate at the last step over the first (measured: 0.50 -> 0.75 -> 0.88 at 3e-3)
ODDS = 0.1  # each member's probability of its rewarded answer, at its last version over its first, on average


def _rate(state, run: str, step: int) -> float:
    """The share of the step's answers that were right; 0 when the teachers wrote no valid task to answer."""
    outcomes = Counter(state.get(run, step, "check")["outcomes"].values())
    return outcomes["correct"] / max(1, sum(outcomes.values()))


def _odds(store: ArtifactStore, base, ref, role: str) -> float:
    """The mean probability, over the member's own prompts, of its rewarded answer at the fork (the version loaded into
    a copy of the base model, which stays bare)."""
    model = store.load_into_peft(copy.deepcopy(base.model), ref)
    probs = fork_probabilities(model, base.tokenizer)
    return float(torch.tensor([p for name, p in probs.items() if name.startswith(role)]).mean())


def test_the_students_solve_rate_rises(tmp_path, echo_model):
    cfg, state, _ = seeded_run(tmp_path, echo_model, steps=STEPS, run_id="learn",
                               extra=(f"trainer.lr={LEARN_LR}", "evolution.every_k=1000"))
    rates = [_rate(state, "learn", s) for s in range(1, STEPS + 1)]
    assert rates[0] > 0 and rates[-1] >= rates[0] + MARGIN, rates  # the first step had tasks, some solved
    store = ArtifactStore(cfg.store_root)
    final = state.get("learn", STEPS, "update")["population"]
    base = load_base_model(echo_model)
    for adapter, member in final.items():
        first = _odds(store, base, store.ref(adapter, 1), member["role"])
        last = _odds(store, base, store.ref(adapter, member["version"]), member["role"])
        assert member["version"] > 1 and last >= first + ODDS, (adapter, first, last)
