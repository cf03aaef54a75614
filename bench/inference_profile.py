"""Where a decode step's time goes, for bench.inference: the same batches run once under torch.profiler with one new
token a row (the prompt pass) and once whole, and the difference of the two split by the operators' own time on the
calling thread into base projections (the base's matrix products), LoRA (the adapters' batched products and the
row gathers around them), attention (scaled dot-product attention over the KV cache), sampling (softmax, top-k/p,
the draw) and other operators (norms, rotary, cache writes, element-wise); the rest of the wall time ran no
operator: Python and the framework between them. Shares of the profiled decode time (the profiler's own cost
included, so a guide to where the time goes, not a timing)."""

from __future__ import annotations

import time

CATEGORIES = ("projections", "lora", "attention", "sampling", "other_ops", "python")
_PROJECTIONS = ("mkldnn::_linear_pointwise", "aten::addmm", "aten::mm", "aten::linear", "aten::matmul")
_LORA = ("aten::bmm", "aten::baddbmm", "aten::_grouped_mm", "aten::index_copy_", "aten::index_select",
         "aten::index_add", "aten::index_add_")
_SAMPLING = ("softmax", "multinomial", "topk", "sort", "cumsum", "argmax", "exponential", "log_softmax", "gather")


def category(op: str) -> str:
    """The category of an operator's name (`aten::bmm`, `mkldnn::_linear_pointwise`, ...)."""
    if op.startswith(_PROJECTIONS):
        return "projections"
    if op in _LORA:
        return "lora"
    if "scaled_dot_product" in op or "attention" in op:
        return "attention"
    if any(word in op for word in _SAMPLING):
        return "sampling"
    return "other_ops"


def profiled(backend, batches: list[list]) -> tuple[float, dict[str, float]]:
    """Wall seconds of generating the batches under the profiler, and seconds per category (python: the rest)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for batch in batches:
            list(backend.generate(batch))
        wall = time.perf_counter() - start
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    for event in prof.key_averages():
        seconds[category(event.key)] += event.self_cpu_time_total / 1e6
    seconds["python"] = max(0.0, wall - sum(seconds.values()))
    return wall, seconds


def decode_split(whole: tuple[float, dict], prompt_pass: tuple[float, dict]) -> dict[str, float]:
    """Each category's share of the decode steps: the whole batches' profile minus their prompt pass's."""
    part = {k: max(0.0, whole[1][k] - prompt_pass[1][k]) for k in CATEGORIES}
    total = sum(part.values())
    return {k: round(v / total, 3) for k, v in part.items()} if total > 0 else {}
