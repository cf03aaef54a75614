"""Compute budgets (spec 14): parsing `--budget` and deciding when a run has spent it."""

from __future__ import annotations

import pytest

from coordinator.record.ledger import budget_spent
from coordinator.train import parse_budget
from populora.config import ConfigError, load_config
from populora.records import Usage


def test_parse_budget():
    assert parse_budget("tokens=2e6") == {"tokens": 2_000_000}
    assert parse_budget("tokens=1500, sandbox_jobs=40") == {"tokens": 1500, "sandbox_jobs": 40}
    assert parse_budget("") == {}
    assert parse_budget("flops=2.5e15") == {"flops": 2_500_000_000_000_000}
    for bad, says in (("steps=3", "unknown budget 'steps'"), ("tokens=lots", "not a number"),
                      ("tokens=-5", "positive"), ("tokens=nan", "positive"), ("tokens=inf", "positive")):
        with pytest.raises(ConfigError, match=says):
            parse_budget(bad)


def test_budget_is_reached_at_or_past_it():
    cfg = load_config(env=False, overrides=["run.budget_tokens=100"])
    assert budget_spent(cfg, Usage(60, 39)) == ""
    assert budget_spent(cfg, Usage(60, 40)).startswith("tokens 100 >= budget 100")
    jobs = load_config(env=False, overrides=["run.budget_sandbox_jobs=5"])
    assert budget_spent(jobs, Usage(10**9, 0, 4)) == "" and budget_spent(jobs, Usage(0, 0, 5))
    assert budget_spent(load_config(env=False), Usage(10**12, 10**12, 10**9)) == ""  # no budget: never


def test_flop_budget_counts_only_the_charged_flops():
    cfg = load_config(env=False, overrides=["run.budget_flops=1000"])
    # the warm start's FLOPs are in Usage.flops but not charged: only `charged_flops` decides
    assert budget_spent(cfg, Usage(flops=10**9), 999) == ""
    assert budget_spent(cfg, Usage(flops=10**9), 1000).startswith("flops")
