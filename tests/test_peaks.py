"""The machine's measured ceiling (populora/peaks.py): the model's products, a real measurement on tiny shapes, and
the best-known merge kept in the cache: keyed by host, dated, old figures dropped, a corrupt file moved aside."""

from __future__ import annotations

import calendar
import json
import logging
from types import SimpleNamespace

import torch

from populora.peaks import (
    MAX_AGE_DAYS,
    Peaks,
    Shape,
    best_known,
    machine_key,
    measure,
    merged,
    model_shapes,
    stamp,
)

NOW = calendar.timegm((2026, 12, 4, 12, 0, 0, 0, 0, 0))


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
    assert got.ceiling().flops_per_s["float32"] == got.gflops["float32"] * 1e9
    assert got.host and got.measured_at and set(got.dates) >= {"float32", "bandwidth"}


def _peaks(fp32, bf16, bw, n=1, when=NOW, host="h1") -> Peaks:
    date = stamp(when)
    return Peaks(device="cpu", threads=2, cores=2, gflops={"float32": fp32, "bfloat16": bf16}, bandwidth_gb_s=bw,
                 shapes="s", measurements=n, methods={"float32": f"m{fp32}"}, host=host, measured_at=date,
                 dates={"float32": date, "bandwidth": date, **({"bfloat16": date} if bf16 else {})})


def test_the_best_of_each_figure_is_kept_with_the_date_it_was_measured():
    best = merged(_peaks(100.0, None, 20.0, when=NOW - 86400), _peaks(80.0, 200.0, 25.0))
    assert best.gflops == {"float32": 100.0, "bfloat16": 200.0}
    assert best.bandwidth_gb_s == 25.0 and best.measurements == 2
    assert best.methods["float32"] == "m100.0"
    assert best.dates == {"float32": "2026-12-03T12:00:00Z", "bfloat16": "2026-12-04T12:00:00Z",
                          "bandwidth": "2026-12-04T12:00:00Z"}
    assert best.measured_at == "2026-12-04T12:00:00Z"


def test_best_known_keeps_a_machine_s_highest_figures_in_the_cache(tmp_path):
    first = best_known(_peaks(50.0, None, 10.0), str(tmp_path), now=NOW)
    assert first.gflops["float32"] == 50.0
    # a measurement under load a day later: lower
    second = best_known(_peaks(40.0, None, 12.0, when=NOW + 86400), str(tmp_path), now=NOW + 86400)
    assert second.gflops["float32"] == 50.0 and second.bandwidth_gb_s == 12.0 and second.measurements == 2
    (entry,) = json.loads((tmp_path / "peaks.json").read_text()).values()
    assert entry["gflops"]["float32"] == 50.0 and entry["dates"]["float32"] == "2026-12-04T12:00:00Z"
    assert entry["dates"]["bandwidth"] == "2026-12-05T12:00:00Z" and entry["host"] == "h1"


def test_each_host_keeps_its_own_figures(tmp_path):
    assert machine_key(_peaks(1.0, None, 1.0, host="h1")) != machine_key(_peaks(1.0, None, 1.0, host="h2"))
    best_known(_peaks(50.0, None, 10.0, host="h1"), str(tmp_path), now=NOW)
    other = best_known(_peaks(20.0, None, 4.0, host="h2"), str(tmp_path), now=NOW)
    assert other.gflops["float32"] == 20.0 and other.measurements == 1  # not h1's figures
    stored = json.loads((tmp_path / "peaks.json").read_text())
    assert sorted(e["host"] for e in stored.values()) == ["h1", "h2"]


def test_figures_older_than_the_age_limit_give_way_to_a_new_measurement(tmp_path, caplog):
    best_known(_peaks(90.0, None, 30.0), str(tmp_path), now=NOW)
    later = NOW + (MAX_AGE_DAYS + 1) * 86400
    with caplog.at_level(logging.INFO, logger="populora.peaks"):
        got = best_known(_peaks(60.0, None, 20.0, when=later), str(tmp_path), now=later)
    assert got.gflops["float32"] == 60.0 and got.bandwidth_gb_s == 20.0
    assert "more than" in caplog.text
    # an entry written before measurements were dated is not kept either
    path = tmp_path / "peaks.json"
    undated = _peaks(500.0, None, 90.0, host="old")
    stored = json.loads(path.read_text())
    stored["old|key"] = {**undated.as_json(), "dates": {}, "measured_at": ""}
    path.write_text(json.dumps(stored))
    best_known(_peaks(61.0, None, 20.0, when=later), str(tmp_path), now=later)
    assert "old|key" not in json.loads(path.read_text())


def test_a_corrupt_cache_is_moved_aside_and_written_again(tmp_path, caplog):
    path = tmp_path / "peaks.json"
    for corrupt in ("{not json", "[1, 2]", json.dumps({"k": {"unknown_field": 1}})):
        path.write_text(corrupt)
        with caplog.at_level(logging.WARNING, logger="populora.peaks"):
            got = best_known(_peaks(30.0, None, 5.0), str(tmp_path), now=NOW)
        assert got.gflops["float32"] == 30.0 and got.measurements == 1
        assert "moved aside" in caplog.text
        (entry,) = json.loads(path.read_text()).values()  # rewritten: the next run merges into this measurement
        assert entry["gflops"]["float32"] == 30.0
        aside = [p for p in tmp_path.iterdir() if p.name.startswith("peaks.json.corrupt-")]
        assert aside and any(p.read_text() == corrupt for p in aside)
        for p in aside:
            p.unlink()
        caplog.clear()
