"""bench.gpu end to end on the tiny shape (the CPU runs the same code the GPU check runs): every key is there and
numeric, each measurement was written as it was taken, and a missing package is named with the way to bring it."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gpu

ROOT = Path(__file__).resolve().parents[1]
OPERATORS = ["M1", "M2", "M3", "M4", "X1", "X2", "X3", "X4"]
NUMERIC = [
    "gpu_tokens_per_s_8_adapters", "gpu_tokens_per_s_1_adapter", "gpu_tokens_per_s_base",
    "gpu_wall_s_8_adapters", "gpu_wall_s_1_adapter", "gpu_wall_s_base",
    "gpu_eight_vs_one_wall_ratio", "gpu_lora_overhead",
    "gpu_update_s_batched", "gpu_update_s_sequential", "gpu_update_s_one_by_one_same_layer",
    "gpu_batched_update_gain", "gpu_batched_update_gain_same_layer",
    "gpu_evolver_max_seconds", "cpu_evolver_max_seconds",
]


def finite_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@pytest.mark.slow
def test_tiny_shape_gives_every_key(tmp_path):
    jsonl = tmp_path / "figures.jsonl"
    proc = subprocess.run([sys.executable, "-m", "bench.gpu", "--json", "--shape", "tiny", "--threads", "1",
                           "--repeats", "1", "--jsonl", str(jsonl)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not [k for k in out if k.endswith("_error")], out
    missing = [k for k in NUMERIC if not finite_number(out.get(k))]
    assert not missing, f"missing or not numeric: {missing}"
    for key in ("gpu_evolver_seconds", "cpu_evolver_seconds"):
        assert sorted(out[key]) == OPERATORS and all(finite_number(v) for v in out[key].values())
    assert out["shape"] == "tiny" and out["device"] == "cpu" and out["adapters"] == 8 and out["rank"] == 32
    assert set(out["targets_met"]) == {"gpu_eight_vs_one_wall_ratio<=1.3", "gpu_batched_update_gain>=2",
                                       "gpu_evolver_max_seconds<=1"}
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


def test_the_7b_shape_refuses_a_cpu(capsys):
    assert gpu.main(["--shape", "qwen2.5-7b", "--device", "cpu"]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err


def test_qwen_shape_is_qwen25_7b():
    config = gpu.SHAPES["qwen2.5-7b"].config
    assert (config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"],
            config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"]) == (
        3584, 18944, 28, 28, 4, 152064)
    assert gpu.lora_layer(config)[1] == ("self_attn.k_proj", 3584, 512)
