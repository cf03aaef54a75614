"""bench.trainer's memory path on the tiny model: a probe's update runs in its own process, with the memory settings
on or off, and reports its peak, its throughput and (settings on) the chunked-vs-whole log-probability gap."""

import argparse

import pytest

from bench import trainer


def _args(**kw):
    base = {"model": "tiny", "rank": 4, "device": "cpu", "threads": 1, "probe_settings": "saving"}
    return argparse.Namespace(**{**base, **kw})


def test_the_plain_probe_turns_every_memory_setting_off():
    assert trainer.memory_overrides(True, 4096) == []
    assert trainer.memory_overrides(False, 4096) == ["trainer.activation_checkpointing=false",
                                                      "trainer.attention=eager", "trainer.logprob_chunk_tokens=4096",
                                                      "trainer.mmap_threshold_kb=0"]


@pytest.mark.slow
def test_a_probe_updates_four_adapters_in_one_micro_batch_and_reports_its_peak():
    out = trainer.probe(_args(probe=128))
    # 4 adapters x 2 rollouts of 128 / 8 = 16 tokens, a quarter of them prompt: 12 response tokens each
    assert out["response_tokens"] == trainer.MEMORY_ADAPTERS * 2 * 12
    assert out["peak_mb"] >= out["rss_mb_before"] > 0 and out["tokens_per_s"] > 0
    assert 0 <= out["max_abs_logprob_diff"] <= 1e-5


@pytest.mark.slow
def test_a_probe_in_a_fresh_process_with_the_settings_off():
    out = trainer.run_probe(_args(probe=0), 64, "plain")
    assert out["settings"] == "plain" and out["micro_batch_tokens"] == 64 and out["peak_mb"] > 0
    assert "max_abs_logprob_diff" not in out
