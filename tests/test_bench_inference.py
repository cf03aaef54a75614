"""bench.inference: its workload is what the phases send (uneven rows per adapter, real prompts), and the bench run
end to end on the tiny model gives every key, each figure computed from that run."""

import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench import inference, inference_engines, inference_profile, inference_workload

ROOT = Path(__file__).resolve().parents[1]
RATES = ["mixed_tokens_per_s", "base_tokens_per_s", "sequential_tokens_per_s", "mixed_gather_tokens_per_s",
         "peft_mixed_tokens_per_s", "loop_tokens_per_s"]


def finite_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def planned():
    """The workloads of the bench with the tiny model's tokenizer-free parts: config, sandbox, seed tasks."""
    from populora.store import ArtifactStore

    with tempfile.TemporaryDirectory() as tmp:
        workload = inference_workload
        cfg = workload.bench_config("tiny", Path(tmp), 0)
        run, services = workload.open_run(cfg, ArtifactStore(Path(tmp) / "store"), None)
        try:
            tasks = workload.seed_tasks(run)
            ids = [f"bench-{i}" for i in range(workload.N_ADAPTERS)]
            plans = {n: workload.make_workload(run, n, workload.SHAPES[n], ids, tasks) for n in workload.SHAPES}
            yield run, ids, plans, {n: workload.phase_batches(run, w) for n, w in plans.items()}
        finally:
            services.close()


def test_batches_are_the_phases_own_with_uneven_rows_per_adapter(planned):
    from coordinator.run import phases

    run, ids, plans, batches = planned
    large = plans["large"]
    propose, solve = batches["large"]
    slots = phases.propose_slots(run, large.matched, large.population)
    assert [r.request_id for r in propose] == [s.id for s in slots]
    expected, _ = phases.teacher_requests(run, large.buffers, slots, inference_workload.STEP)
    assert [r.messages for r in propose] == [[{"role": m.role, "content": m.content} for m in e.messages]
                                             for e in expected]
    # only the proposals drawn valid are solved, n samples each, by their match's student
    assert sorted(r.request_id for r in solve) == sorted(f"{pid}/solve" for pid in large.valid)
    assert 0 < len(solve) < len(propose)
    assert all(r.sampling.n == run.cfg.tasks.n_samples and r.sampling.temperature > 0 for r in solve)
    rows: dict[str, int] = {}
    for r in propose + solve:
        rows[r.adapter.adapter_id] = rows.get(r.adapter.adapter_id, 0) + r.sampling.n
    assert len(set(rows.values())) > 1, rows  # uneven
    assert set(rows) == set(ids)
    # prompts of different lengths: code_f teacher prompts are longer than the others
    lengths = {len(r.messages[-1]["content"]) for r in propose}
    assert len(lengths) > 1
    # the small workload is one cpu-smol step: 2 teachers x 3 task types x 2 proposals
    assert len(batches["small"][0]) == 2 * len(run.cfg.tasks.task_types) * 2


@pytest.mark.slow
def test_the_bench_runs_on_the_tiny_model_and_counts_every_figure():
    proc = subprocess.run([sys.executable, "-m", "bench.inference", "--json", "--model", "tiny", "--new-tokens", "2",
                           "--workloads", "small", "--skip-vllm", "--rounds", "2", "--profile-steps", "4"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    missing = [k for k in (f"{r}_small" for r in RATES) if not finite_number(out.get(k))]
    assert not missing, f"missing or not numeric: {missing}"
    assert "mixed_tokens_per_s" not in out  # the large workload was not asked for, and nothing stands in for it
    assert out["new_tokens"] == {"propose": 2, "solve": 2}
    assert out["rows_small"] == sum(out["rows_per_adapter_small"]) > 0
    assert 0 < out["tokens_small"] <= 2 * out["rows_small"]
    assert 0 < out["loop_tokens_small"] <= 2 * out["rows_small"]
    rounds = out["lora_overhead_rounds_small"]  # mixed and base alternated twice, the figures over both rounds
    assert len(rounds) == 2 and all(finite_number(r) and r > 0 for r in rounds)
    assert min(rounds) * 0.99 <= out["lora_overhead_small"] <= max(rounds) * 1.01
    assert out["loop_threads"] == -1  # cpu-smol's generation.threads (the free cores), as the embedded run uses it
    for key, num, den in [("lora_overhead_small", "base_tokens_per_s_small", "mixed_tokens_per_s_small"),
                          ("mixed_vs_peft_small", "mixed_tokens_per_s_small", "peft_mixed_tokens_per_s_small"),
                          ("loop_vs_bench_small", "loop_tokens_per_s_small", "mixed_tokens_per_s_small")]:
        assert out[key] == pytest.approx(out[num] / out[den], rel=1e-2)
    # spec 9, "Mixed ranks": ranks 8, 16, 32, 64 against 30 everywhere, on the same batches, rounds alternating
    assert out["mixed_rank_workload"] == "small" and len(out["mixed_rank_ratio_rounds"]) == 2
    assert out["mixed_rank_ranks"]["bank_width"] == {"mixed": 64, "uniform": 32}
    assert out["mixed_rank_tokens_per_s_ratio"] == pytest.approx(
        out["mixed_rank_tokens_per_s"] / out["uniform_rank_tokens_per_s"], rel=1e-2)
    assert set(out["targets_met"]) == {"lora_overhead_small<=1.6", "mixed_vs_peft_small>=1.2",
                                       "rss_mb_per_extra_adapter<=1.2x_adapter_mb", "loop_vs_bench_small>=0.8",
                                       "mixed_rank_tokens_per_s_ratio>=0.9", "prefill_mfu_small>=0.5",
                                       "decode_roofline_fraction_small>=0.5"}
    # the prompt pass against the peak measured in the bench's process (bench/inference_roofline.py), its work the
    # useful executed FLOPs (populora/analysis/work.py), the length groups' padding beside it
    assert finite_number(out["prefill_mfu_small"]) and out["prefill_mfu_small"] > 0 and out["peak_gflops"] > 0
    assert out["prefill_tokens_small"] > 0 and out["prefill_s_small"] > 0
    assert out["prefill_useful_flops_small"] > 0 and out["prefill_padding_flops_small"] >= 0
    assert out["prefill_mfu_small"] == pytest.approx(
        out["prefill_useful_flops_small"] / out["prefill_s_small"] / (out["peak_gflops"] * 1e9), rel=1e-2)
    split = out.get("decode_time_split_small")  # present whenever the decode steps could be timed
    if out["decode_roofline_fraction_small"] is not None:
        assert set(split) == set(inference_profile.CATEGORIES) and sum(split.values()) == pytest.approx(1, abs=0.01)
        assert 0 < out["decode_profile_steps_small"] <= 4  # a bounded sample of decode steps, not all of them
        assert out["decode_useful_flops_small"] > 0
    # where it is, for whoever watches: each stage and each figure on stderr
    assert "bench.inference: stage = 6/6 plain PEFT" in proc.stderr


def test_decode_time_is_split_by_operator_category():
    assert inference_profile.category("mkldnn::_linear_pointwise") == "projections"
    assert inference_profile.category("aten::addmm") == "projections"
    assert inference_profile.category("aten::bmm") == "lora"
    assert inference_profile.category("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert inference_profile.category("aten::multinomial") == "sampling"
    assert inference_profile.category("aten::rms_norm") == "other_ops"
    zero = dict.fromkeys(inference_profile.CATEGORIES, 0.0)
    whole = (4.0, {**zero, "projections": 2.0, "lora": 0.5, "attention": 0.5, "python": 1.0})
    prompt = (1.0, {**zero, "projections": 0.5, "python": 0.5})
    split = inference_profile.decode_split(whole, prompt)  # decode: 1.5 + 0.5 + 0.5 + 0.5 seconds
    assert split == {**zero, "projections": 0.5, "lora": pytest.approx(1 / 6, abs=1e-3),
                     "attention": pytest.approx(1 / 6, abs=1e-3), "python": pytest.approx(1 / 6, abs=1e-3)}
    assert inference_profile.decode_split((1.0, zero), (1.0, zero)) == {}


def test_an_unknown_workload_is_refused(capsys):
    with pytest.raises(SystemExit):
        inference.main(["--workloads", "huge"])
    assert "unknown ['huge']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        inference.main(["--rounds", "0"])
    assert "--rounds must be >= 1" in capsys.readouterr().err


def test_figures_over_rounds_are_all_tokens_over_all_time():
    runs = [inference_engines.Measured(tokens=100, seconds=1.0), inference_engines.Measured(tokens=100, seconds=3.0)]
    assert inference_engines.over_runs(runs) == 50.0  # not the mean of 100/s and 33.3/s


def test_the_profiled_and_the_prompt_pass_batches_cap_every_row_s_budget():
    from bench.inference_roofline import _capped
    from services.inference.backend import Request, Sampling

    batch = [Request(f"r{n}", prompt="x", sampling=Sampling(max_new_tokens=n)) for n in (1, 5, 40)]
    assert [r.sampling.max_new_tokens for r in _capped([batch], 4)[0]] == [1, 4, 4]
    assert [r.sampling.max_new_tokens for r in batch] == [1, 5, 40]  # the workload itself is left as it was


def test_the_prompt_pass_work_is_counted_in_the_decoding_loop_s_length_groups():
    from bench.inference_roofline import prompt_work
    from populora.analysis.work import Shapes, prompt_group

    shapes = Shapes(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=1000, rank=4,
                    targets=("q_proj",))
    # 2,048 padded tokens a group: 3 prompts of 600 fit one group (1,800), a fourth of 700 would make 2,800
    got = prompt_work(shapes, [[(600, 4), (600, 4), (500, 4), (700, 0)]])
    assert got == prompt_group(shapes, [500, 600, 600], [4, 4, 4]) + prompt_group(shapes, [700], [0])
    assert got.padding == prompt_group(shapes, [500, 600, 600], [4, 4, 4]).padding > 0
