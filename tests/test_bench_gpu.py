"""bench.gpu end to end on the tiny shape (the CPU runs the same code the GPU check runs): generation on the batches
the phases build (uneven rows per adapter, end-of-sequence honoured, the base at the adapters' lengths), the trainer
on those rollouts with the preset's settings, every key
there and numeric, every derived figure (ratios, throughputs, targets_met) following from the run's own
measurements, each measurement written as it was taken, and a missing package named with the way to bring it."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gpu, gpu_model, gpu_workload

ROOT = Path(__file__).resolve().parents[1]
OPERATORS = ["M1", "M2", "M3", "M4", "R1", "X1", "X2", "X3", "X4"]
SIDES = ("8_adapters", "1_adapter", "base")
NUMERIC = [
    *(f"gpu_tokens_per_s_{n}" for n in SIDES), *(f"gpu_wall_s_{n}" for n in SIDES),
    *(f"gpu_tokens_{n}" for n in SIDES),
    "gpu_eight_vs_one_wall_ratio", "gpu_lora_overhead", "gpu_generation_rows", "gpu_generation_1_adapter_rows",
    "gpu_generation_finished_by_eos", "gpu_generation_eos_bias", "gpu_workload_build_s",
    "gpu_update_s_batched", "gpu_update_s_sequential", "gpu_update_s_one_by_one_same_layer",
    "gpu_batched_update_gain", "gpu_batched_update_gain_same_layer", "gpu_update_response_tokens",
    "gpu_update_micro_batches", "gpu_update_extra_mb_batched", "gpu_update_predicted_extra_mb_batched",
    "gpu_update_memory_model_ratio",
    "gpu_evolver_max_seconds", "cpu_evolver_max_seconds",
]


def finite_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


HALF = 0.5e-4  # the Reporter rounds every float to 4 decimals


def _quotient_of(q: float, a: float, b: float) -> bool:
    """q is a / b, each of the three rounded to 4 decimals."""
    return (a - HALF) / (b + HALF) - HALF <= q <= (a + HALF) / (b - HALF) + HALF


def _product_is(count: float, rate: float, seconds: float) -> bool:
    """rate * seconds is `count` (rate = count / seconds, both rounded to 4 decimals)."""
    return abs(rate * seconds - count) <= (rate + seconds) * HALF + HALF * HALF


def assert_generation(out: dict) -> None:
    """The generation figures: the phases' batches (uneven rows per adapter), sampled with end-of-sequence honoured
    and rows ended by it, the base decoding exactly the adapters' tokens, and every ratio from its parts."""
    shape = gpu.SHAPES["tiny"]
    per_adapter = out["gpu_generation_rows_per_adapter"]
    assert len(per_adapter) == 8 and min(per_adapter) > 0 and len(set(per_adapter)) > 1, per_adapter
    assert out["gpu_generation_rows"] == sum(per_adapter)
    assert out["gpu_generation_1_adapter_rows"] == max(per_adapter)
    requests = out["gpu_generation_requests"]
    assert requests["propose"] == 8 * 3 * shape.proposals and 0 < requests["solve"] < requests["propose"]
    assert out["gpu_generation_new_tokens"] == {"propose": shape.new_tokens, "solve": shape.new_tokens}
    sampling = out["gpu_generation_sampling"]
    assert sampling["ignore_eos"] is False and sampling["temperature"] > 0 and sampling["n_samples"] > 1
    assert out["gpu_generation_preset"] == gpu_workload.PRESET
    # rows end on end-of-sequence, unevenly, some before the budget and some at it
    lengths = out["gpu_generation_row_tokens"]
    assert 1 <= lengths["min"] < lengths["max"] <= shape.new_tokens, lengths
    assert 0 < out["gpu_generation_finished_by_eos"] < 1
    assert out["gpu_generation_runs_with_other_lengths"] == 0  # seeded: every adapter run the same rows
    low, high = out["gpu_generation_prompt_tokens"]
    assert low < high and high > 300  # the preset's teacher prompts (6 references), not one-line requests
    # the adapters' tokens are the rows' lengths; the base decoded exactly as many
    assert out["gpu_tokens_8_adapters"] == out["gpu_tokens_base"]
    assert abs(out["gpu_tokens_8_adapters"] / out["gpu_generation_rows"] - lengths["mean"]) <= 0.006
    walls = {n: out[f"gpu_wall_s_{n}"] for n in SIDES}
    for name in SIDES:
        assert _product_is(out[f"gpu_tokens_{name}"], out[f"gpu_tokens_per_s_{name}"], walls[name]), name
    assert 0 < out["gpu_tokens_1_adapter"] <= out["gpu_generation_1_adapter_rows"] * shape.new_tokens
    assert _quotient_of(out["gpu_eight_vs_one_wall_ratio"], walls["8_adapters"], walls["1_adapter"]), out
    assert _quotient_of(out["gpu_lora_overhead"], out["gpu_tokens_per_s_base"], out["gpu_tokens_per_s_8_adapters"])


def assert_trainer_rollouts(out: dict) -> None:
    """The trainer part trained on what the generation part sampled (every adapter's rows, their tokens) with the
    preset's trainer settings."""
    from populora.config import load_config

    assert out["gpu_update_adapters"] == 8
    assert out["gpu_update_rollouts_per_adapter"] == out["gpu_generation_rows_per_adapter"]
    assert out["gpu_update_response_tokens"] == out["gpu_tokens_8_adapters"]
    lengths = out["gpu_update_tokens_per_rollout"]
    low, high = out["gpu_generation_prompt_tokens"]
    assert low < lengths["min"] < lengths["max"] <= high + gpu.SHAPES["tiny"].new_tokens, lengths
    t = load_config(preset=gpu_workload.PRESET, env=False).trainer
    assert out["gpu_update_settings"] == {
        "micro_batch_tokens": t.micro_batch_tokens, "logprob_chunk_tokens": t.logprob_chunk_tokens,
        "activation_checkpointing": t.activation_checkpointing, "attention": t.attention,
        "memory_limit_mb": t.memory_limit_mb}
    assert out["gpu_update_settings"]["activation_checkpointing"] is True


def assert_consistent(out: dict) -> None:
    """The derived figures follow from the measured ones, and targets_met says what the figures say."""
    assert_generation(out)
    updates = {n: out[f"gpu_update_s_{n}"] for n in ("batched", "sequential", "one_by_one_same_layer")}
    assert _quotient_of(out["gpu_batched_update_gain"], updates["sequential"], updates["batched"])
    assert _quotient_of(out["gpu_batched_update_gain_same_layer"], updates["one_by_one_same_layer"],
                        updates["batched"])
    assert_trainer_rollouts(out)
    tokens = out["gpu_update_response_tokens"]
    for name, seconds in updates.items():
        assert _product_is(tokens, out[f"gpu_update_response_tokens_per_s_{name}"], seconds), name
    assert _quotient_of(out["gpu_update_memory_model_ratio"], out["gpu_update_predicted_extra_mb_batched"],
                        out["gpu_update_extra_mb_batched"])
    assert abs(out["cpu_evolver_max_seconds"] - max(out["cpu_evolver_seconds"].values())) <= 0.5e-3 + HALF
    # no GPU here: the gpu_ evolver figures are the CPU's, as the module's docstring says
    assert out["gpu_evolver_seconds"] == out["cpu_evolver_seconds"]
    assert out["gpu_evolver_max_seconds"] == out["cpu_evolver_max_seconds"]
    assert out["targets_met"] == {
        "gpu_lora_overhead<=1.3": out["gpu_lora_overhead"] <= 1.3,
        "gpu_batched_update_gain>=2": out["gpu_batched_update_gain"] >= 2,
        "gpu_evolver_max_seconds<=1": out["gpu_evolver_max_seconds"] <= 1}, out["targets_met"]
    assert all(isinstance(v, bool) for v in out["targets_met"].values())
    assert out["targets_apply_to"] == "--shape qwen2.5-7b on an H200"


@pytest.mark.slow
def test_tiny_shape_gives_every_key(tmp_path):
    jsonl = tmp_path / "figures.jsonl"
    proc = subprocess.run([sys.executable, "-m", "bench.gpu", "--json", "--shape", "tiny", "--threads", "1",
                           "--repeats", "1", "--sandbox", "subprocess", "--jsonl", str(jsonl)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not [k for k in out if k.endswith("_error")], out
    missing = [k for k in NUMERIC if not finite_number(out.get(k))]
    assert not missing, f"missing or not numeric: {missing}"
    for key in ("gpu_evolver_seconds", "cpu_evolver_seconds"):
        assert sorted(out[key]) == OPERATORS and all(finite_number(v) for v in out[key].values())
    assert out["shape"] == "tiny" and out["device"] == "cpu" and out["adapters"] == 8 and out["rank"] == 32
    assert out["gpu_workload_sandbox"].startswith("subprocess (asked for")  # the way a box without bwrap runs
    assert_consistent(out)
    # every figure was also written the moment it was taken, one JSON object per line, with the same value
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    written = {k: v for line in lines for k, v in line.items()}
    assert all(len(line) == 1 for line in lines)
    assert all(written[k] == out[k] for k in NUMERIC)


def test_a_missing_package_is_named_with_how_to_bring_it(monkeypatch, capsys):
    monkeypatch.setattr(gpu, "REQUIRED", [*gpu.REQUIRED, ("no_such_module_for_bench", "no-such-package",
                                                          "this check")])
    assert gpu.main(["--shape", "tiny"]) == 2
    err = capsys.readouterr().err
    assert "no_such_module_for_bench" in err and "no-such-package" in err and "this check" in err
    assert "docs/gpu.md" in err and "--no-index" in err


def test_without_bubblewrap_the_seed_tasks_run_unjailed_and_say_so(monkeypatch):
    monkeypatch.setattr(gpu_workload.shutil, "which", lambda name: None)
    assert gpu_workload.sandbox_backend("auto") == ("subprocess", "no bwrap (bubblewrap) on PATH")
    assert gpu_workload.sandbox_backend("zygote")[0] == "zygote"


def test_the_7b_shape_refuses_a_cpu(capsys):
    assert gpu.main(["--shape", "qwen2.5-7b", "--device", "cpu"]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err


def test_qwen_shape_is_qwen25_7b():
    config = gpu.SHAPES["qwen2.5-7b"].config
    assert (config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"],
            config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"]) == (
        3584, 18944, 28, 28, 4, 152064)
    assert gpu_model.lora_layer(config)[1] == ("self_attn.k_proj", 3584, 512)
