"""bench.trainer's memory path on the tiny model: a probe's update runs in its own process, with the memory settings
on or off, and reports its peak, the memory model's prediction of it, its throughput and (settings on) the
chunked-vs-whole log-probability gap; with the settings on the peak is lower, and the prediction holds."""

import argparse

import pytest

from bench import trainer_memory


def _args(**kw):
    base = {"model": "tiny", "rank": 4, "device": "cpu", "threads": 1, "probe_settings": "saving", "probe_rows": 2,
            "probe_prompt": 0.25, "probe_override": []}
    return argparse.Namespace(**{**base, **kw})


def test_the_plain_probe_turns_every_memory_setting_off():
    assert trainer_memory.memory_overrides(True, 4096) == []
    assert trainer_memory.memory_overrides(False, 4096) == ["trainer.activation_checkpointing=false",
                                                      "trainer.attention=eager", "trainer.logprob_chunk_tokens=4096",
                                                      "trainer.mmap_threshold_kb=0"]


@pytest.mark.slow
def test_a_probe_updates_four_adapters_in_one_micro_batch_and_reports_its_peak():
    out = trainer_memory.probe(_args(probe=128))
    # 4 adapters x 2 rollouts of 128 / 8 = 16 tokens, a quarter of them prompt: 12 response tokens each
    assert out["response_tokens"] == trainer_memory.MEMORY_ADAPTERS * 2 * 12
    assert out["peak_mb"] >= out["rss_mb_before"] > 0 and out["tokens_per_s"] > 0
    assert out["extra_mb"] == out["peak_mb"] - out["rss_mb_before"] and out["predicted_extra_mb"] > 0
    assert out["base_mb"] > 0 and out["adapters_at_rest_mb"] > 0
    assert 0 <= out["max_abs_logprob_diff"] <= 1e-5


@pytest.mark.slow
def test_the_settings_on_peak_lower_than_off_and_as_the_memory_model_predicts():
    # 384 response tokens: the tiny model's 151,936-entry logits dominate the update, so the settings matter here
    off = trainer_memory.run_probe(_args(probe=0), 512, "plain")
    on = trainer_memory.run_probe(_args(probe=0), 512, "saving")
    assert off["settings"] == "plain" and off["micro_batch_tokens"] == 512 and "max_abs_logprob_diff" not in off
    assert on["response_tokens"] == off["response_tokens"] == 384
    assert on["peak_mb"] < off["peak_mb"] and on["extra_mb"] <= 0.8 * off["extra_mb"], (on, off)
    assert abs(on["predicted_extra_mb"] - on["extra_mb"]) <= 0.25 * on["extra_mb"], on


@pytest.mark.slow
def test_the_bench_at_its_smallest_on_the_tiny_model():
    import json
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run([sys.executable, "-m", "bench.trainer", "--json", "--model", "tiny", "--adapters", "2",
                           "--rollouts", "2", "--tokens", "16", "--rank", "4", "--repeats", "1", "--plain-tokens", "",
                           "--threads", "1", "--device", "cpu"],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["default_mode"] == "sequential" and out["tokens_per_s"] > 0 and out["batched_tokens_per_s"] > 0
    assert out["peak_mb_1k"] > 0 and out["peak_mb_4k"] > 0 and "peak_mb_1k_plain" not in out
    # the update against the peak measured in the bench's process: the useful executed FLOPs of its rows
    assert 0 < out["update_mfu"] == out["update_mfu_sequential"] and out["update_mfu_batched"] > 0
    assert out["update_useful_flops_per_token"] > 0 and out["update_recomputed_flops_per_token"] > 0
    assert out["update_mfu_saving_1k"] > 0 and out["lora_targets"] and out["peak_gflops"] > 0
    assert out["sequential"]["rows"] == 4 and out["sequential"]["row_prompt_tokens"] == 4
    # the mixed-rank update: ranks 8 to 64 against 30 on the same rollouts, one counted round (--repeats 1)
    assert out["mixed_rank_update_ranks"] == {"mixed": [8, 16, 32, 64], "uniform": [30] * 4}
    assert len(out["mixed_rank_update_rounds"]) == 1 and out["mixed_rank_update_mode"] == "batched"
    assert out["mixed_rank_update_ratio"] == pytest.approx(
        out["mixed_rank_update_tokens_per_s"] / out["uniform_rank_update_tokens_per_s"])
    assert out["mixed_rank_update_tokens_per_s"] > 0 and out["uniform_rank_update_tokens_per_s"] > 0
    assert out["mixed_rank_update_ratio"] > 0
    # where it is, for whoever watches
    for line in ("bench.trainer: memory probe = 1024 tokens", "bench.trainer: mixed-rank round",
                 "bench.trainer: batched update = 1 of 1", "bench.roofline: measuring the peak"):
        assert line in proc.stderr, line
