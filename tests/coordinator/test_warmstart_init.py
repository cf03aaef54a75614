"""The warm start in the loop (spec 13): step 0 fits one adapter on sandbox-verified generated programs, every member
starts from it, the baseline starts from the identical adapter, and the run records it."""

from __future__ import annotations

import pytest
import torch

from coordinator.run.journal import Journal, JournalDB
from coordinator.train import run_training
from populora.config import load_config
from populora.store import ArtifactStore


def _init_run(tmp_path, mode: str, cache):
    out = tmp_path / mode
    overrides = [f"run.output_dir={out}", f"store.root={out / 'store'}", f"league.db_url=sqlite:///{out / 'l.sqlite'}",
                 f"run.mode={mode}", "warmstart.enabled=true", "warmstart.programs=3", "warmstart.steps=2",
                 "warmstart.batch_size=2", "warmstart.n_references=1", f"warmstart.cache_dir={cache}",
                 "tasks.seed_buffer_size=1", "tasks.seed_max_rounds=1", "generation.max_new_tokens=4"]
    if mode == "baseline":
        overrides += ["population.n_teachers=1", "population.n_students=1", "rewards.teacher_reward=learnability"]
    cfg = load_config(preset="cpu-tiny", overrides=overrides, env=False)
    state = JournalDB(cfg.league_db_url)
    state.create_run(mode, cfg.run.mode, cfg.to_yaml())
    cfg.run.steps = 0
    run_training(cfg, mode, state)
    return ArtifactStore(cfg.store_root), Journal(state, mode), state


@pytest.mark.slow
def test_every_member_and_the_baseline_start_from_one_warm_adapter(tmp_path, one_torch_thread):
    cache = tmp_path / "cache"
    store, pop, pop_state = _init_run(tmp_path, "population", cache)
    warm = pop.get(0, "warmstart")
    assert warm.adapter_id == "population.warm" and not warm.cached and warm.examples == 4
    assert len(warm.losses) == 2 and warm.digest
    start = store.read(store.ref("population.warm", 1)).weights
    assert any(torch.count_nonzero(w) for k, w in start.items() if "lora_B" in k)
    members = pop.get(0, "init").population
    assert sorted(members) == ["population.S0", "population.S1", "population.T0", "population.T1"]
    for adapter_id in members:
        weights = store.read(store.ref(adapter_id, 1)).weights
        assert all(torch.equal(weights[k], start[k]) for k in start), adapter_id
    # the run's stored config says how it started
    assert "warmstart:" in pop_state.get_run("population")["config_yaml"]

    base_store, base, _ = _init_run(tmp_path, "baseline", cache)
    bwarm = base.get(0, "warmstart")
    assert bwarm.cached and bwarm.digest == warm.digest  # the identical adapter, from the cache
    b0 = base_store.read(base_store.ref("baseline.B0", 1)).weights
    assert all(torch.equal(b0[k], start[k]) for k in start)
    # both arms count the fit the same way (spec 14: every run that starts from it pays for it)
    assert pop.get(0, "account").adapters["warmstart"].trained_tokens == warm.tokens > 0
    assert base.get(0, "account").adapters["warmstart"].trained_tokens == warm.tokens
    # seeding proposed with the warm adapter, credited to no teacher
    assert base.get(0, "account").adapters.get("baseline.warm") is not None
