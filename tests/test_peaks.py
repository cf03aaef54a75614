"""The machine's measured ceiling (populora/peaks.py): the model's products, a real measurement on tiny shapes, and
the best-known merge kept in the cache."""

from __future__ import annotations

import json
from types import SimpleNamespace

import torch

from populora.peaks import Peaks, Shape, best_known, measure, merged, model_shapes


def test_the_products_of_a_forward_pass_are_the_model_parameters():
    # a Llama/Qwen2-shaped config: every linear weight of a layer, L layers, and the LM head
    config = SimpleNamespace(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=128, vocab_size=1000)
    shapes = model_shapes(config)
    per_layer = 64 * 64 * 2 + 2 * (32 * 64) + 3 * 64 * 128  # q, o; k, v (2 heads of 16); gate, up, down
    assert sum(s.d_in * s.d_out * s.count for s in shapes) == 3 * per_layer + 1000 * 64


def test_a_measurement_reports_every_dtype_and_the_bandwidth(monkeypatch):
    import populora.peaks as peaks

    monkeypatch.setattr(peaks, "MIN_READ_BYTES", 2**20)  # a small read: this checks the shape of the result
    shapes = [Shape(32, 16, 2), Shape(16, 32, 1)]
    got = measure(shapes, 2**20, threads=1, quick=True)
    assert got.threads == 1 and torch.get_num_threads() >= 1
    assert got.gflops["float32"] > 0 and got.bandwidth_gb_s > 0
    assert set(got.gflops) == {"float32", "bfloat16"}  # bfloat16 None where the cores lack it
    assert got.ceiling("float32").flops_per_s == got.gflops["float32"] * 1e9


def _peaks(fp32, bf16, bw, n=1) -> Peaks:
    return Peaks(device="cpu", threads=2, cores=2, gflops={"float32": fp32, "bfloat16": bf16}, bandwidth_gb_s=bw,
                 shapes="s", measurements=n, methods={"float32": f"m{fp32}"})


def test_the_best_of_each_figure_is_kept():
    best = merged(_peaks(100.0, None, 20.0), _peaks(80.0, 200.0, 25.0))
    assert best.gflops == {"float32": 100.0, "bfloat16": 200.0}
    assert best.bandwidth_gb_s == 25.0 and best.measurements == 2
    assert best.methods["float32"] == "m100.0"


def test_best_known_keeps_a_machine_s_highest_figures_in_the_cache(tmp_path):
    first = best_known(_peaks(50.0, None, 10.0), str(tmp_path))
    assert first.gflops["float32"] == 50.0
    second = best_known(_peaks(40.0, None, 12.0), str(tmp_path))  # a measurement under load: lower
    assert second.gflops["float32"] == 50.0 and second.bandwidth_gb_s == 12.0 and second.measurements == 2
    (entry,) = json.loads((tmp_path / "peaks.json").read_text()).values()
    assert entry["gflops"]["float32"] == 50.0


def test_an_unreadable_cache_leaves_the_measurement_as_it_is(tmp_path):
    (tmp_path / "peaks.json").write_text("{not json")
    assert best_known(_peaks(30.0, None, 5.0), str(tmp_path)).gflops["float32"] == 30.0
