"""Each step's phases against what the machine could do: the FLOPs a phase is charged (spec 14) per second over the
measured compute peak of the cores it ran on (`mfu`), and the least time the roofline allows its work over the time
it took (`roofline_fraction`; populora/analysis/roofline.py). metrics.jsonl carries them as `efficiency`, the report
and the dashboard show them.

The ceiling is measured in the coordinator's own process, which in embedded mode is the one the services compute in,
once per process at the run's start (populora/peaks.py, short) for every thread count the phases use, and merged
into the best this machine has reached before: a measurement taken while other jobs share the cores is low, and
would flatter every fraction. In distributed mode the phases run elsewhere, on machines this process cannot measure,
so the fractions are left out.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable

from coordinator.run.modelsize import ModelSize, model_size
from coordinator.run.phases.accounting import budget_flops
from populora.analysis.roofline import Ceiling, fraction, generation_seconds, mfu, update_seconds
from populora.config import Config

log = logging.getLogger(__name__)

GENERATION_PHASES = ("propose", "solve")


def phase_threads(cfg: Config) -> dict[str, int]:
    """The torch threads each computing phase runs on: its setting, with 0 (torch's own setting) as torch has it now
    and -1 (the cores other processes leave free, chosen per batch) as every core this process may use, the most it
    can take."""
    import torch

    from populora.models import allowed_cpus

    def resolve(n: int) -> int:
        return n if n > 0 else torch.get_num_threads() if n == 0 else len(allowed_cpus())

    gen, train = resolve(cfg.generation.threads), resolve(cfg.trainer.threads)
    return {"propose": gen, "solve": gen, "update": train, "step": max(gen, train)}


def compute_dtype(cfg: Config) -> str:
    """The dtype the base model's products run in (model.dtype, `auto` resolved for the device)."""
    from populora.models import _device, _dtype

    return str(_dtype(cfg.model.dtype, _device(cfg.model.device))).removeprefix("torch.")


@functools.lru_cache(maxsize=4)
def _measured(name: str, cache: str, device: str, dtype: str, threads: tuple[int, ...]) -> dict[int, dict]:
    """{threads: {"gflops", "bandwidth_gb_s"}} for the model's products in `dtype`, the best this machine has reached
    (populora.peaks.best_known), measured once per process."""
    import torch
    from transformers import AutoConfig

    from populora.models import resolve_model_dir
    from populora.peaks import best_known, measure, model_shapes

    config = AutoConfig.from_pretrained(resolve_model_dir(name, cache))
    shapes = model_shapes(config)
    weight_bytes = sum(s.d_in * s.d_out * s.count for s in shapes) * torch.empty((), dtype=getattr(torch, dtype)
                                                                                 ).element_size()
    out = {}
    for n in threads:
        dtypes = ("float32",) if dtype == "float32" else ("float32", dtype)
        peaks = best_known(measure(shapes, weight_bytes, n, device, dtypes=dtypes, quick=True), cache)
        out[n] = {"gflops": peaks.gflops.get(dtype) or peaks.gflops["float32"], "bandwidth_gb_s": peaks.bandwidth_gb_s}
    return out


def run_ceilings(cfg: Config) -> dict | None:
    """What `efficiency` measures a run's phases against: the phases' threads, the dtype and the ceiling per thread
    count; None in distributed mode, or where the ceiling cannot be measured (it is a report, not a reason to stop
    a run)."""
    if cfg.run.deployment != "embedded":
        return None
    threads = phase_threads(cfg)
    dtype = compute_dtype(cfg)
    try:
        from populora.models import _device

        device = _device(cfg.model.device).type
        peaks = _measured(cfg.model.name, cfg.model.cache_dir, device, dtype, tuple(sorted(set(threads.values()))))
    except (OSError, RuntimeError, ValueError) as e:
        log.warning("the machine's peak could not be measured (%s): the steps' metrics leave out their efficiency", e)
        return None
    return {"threads": threads, "dtype": dtype, "peaks": peaks, "size": model_size(cfg)}


def _unique_prompt_tokens(items: Iterable[tuple[str, list[int]]]) -> int:
    """Prompt tokens a prompt pass must run: a prompt the same adapter reads twice (a request's n samples) once."""
    return sum(len(p) for p in {(a, tuple(p)): p for a, p in items}.values())


def efficiency(record, row: dict, ceilings: dict | None) -> dict:
    """metrics.jsonl's `efficiency` for a training step: per computing phase its threads, charged FLOPs, seconds,
    GFLOP/s, mfu, least seconds on the roofline and roofline_fraction; the step's charged FLOPs over its seconds as
    `step` (its window when steps overlap). {} without ceilings."""
    if ceilings is None:
        return {}
    size: ModelSize = ceilings["size"]
    n = size.with_adapter
    element = 2 if ceilings["dtype"] in ("bfloat16", "float16") else 4
    threads, peaks = ceilings["threads"], ceilings["peaks"]

    def ceiling(phase: str) -> Ceiling:
        p = peaks[threads[phase]]
        return Ceiling(p["gflops"] * 1e9, p["bandwidth_gb_s"] * 1e9)

    spent = record.spent.phases
    seconds = row["seconds"]
    rows = {"propose": [(p.teacher, p.prompt_token_ids, p.response_token_ids) for p in record.proposed.proposals],
            "solve": [(a.student, a.prompt_token_ids, a.response_token_ids) for a in record.solved.attempts]}
    phases = {}
    for name in (*GENERATION_PHASES, "update"):
        if name not in spent or not seconds.get(name):
            continue
        c = ceiling(name)
        if name == "update":
            least = update_seconds(spent[name].trained_tokens, n, c)
        else:
            adapters = {a for a, _, _ in rows[name]}
            weight_bytes = element * (size.base + len(adapters) * size.adapter)
            least = generation_seconds(_unique_prompt_tokens((a, p) for a, p, _ in rows[name]),
                                       [[len(r) for _, _, r in rows[name]]], n, weight_bytes, c)
        phases[name] = {"threads": threads[name], "flops": spent[name].flops, "seconds": seconds[name],
                        "gflops_per_s": spent[name].flops / seconds[name] / 1e9,
                        "mfu": mfu(spent[name].flops, seconds[name], c.flops_per_s),
                        "least_seconds": least, "roofline_fraction": fraction(least, seconds[name])}
    step_s = row.get("window_s") or row["step_seconds"]
    charged = budget_flops(record.spent)
    step_peak = ceiling("step").flops_per_s
    return {"efficiency": {
        "dtype": ceilings["dtype"],
        "peaks": {str(t): p for t, p in sorted(peaks.items())},
        "phases": phases,
        "step": {"threads": threads["step"], "flops": charged, "seconds": step_s,
                 "gflops_per_s": charged / step_s / 1e9 if step_s else None, "mfu": mfu(charged, step_s, step_peak),
                 "least_seconds": sum(p["least_seconds"] for p in phases.values()),
                 "roofline_fraction": fraction(sum(p["least_seconds"] for p in phases.values()), step_s)}}}


def efficiency_table(rows: list[dict]) -> str:
    """The report's table of where a step's time goes against what it could be: per computing phase and for the
    whole step, the mean over the run's steps of seconds, least seconds on the roofline, GFLOP/s, mfu and
    roofline_fraction, with the ceiling they were measured against."""
    import html

    measured = [r["efficiency"] for r in rows if r.get("efficiency")]
    if not measured:
        return ("<p>Not measured (a distributed run computes on machines the coordinator cannot measure, or the "
                "run predates these figures).</p>")

    def mean(xs: list) -> float | None:
        xs = [x for x in xs if x is not None]
        return sum(xs) / len(xs) if xs else None

    def cell(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    names = [p for p in (*GENERATION_PHASES, "update") if any(p in e["phases"] for e in measured)] + ["step"]
    head = ("<tr><th>phase</th><th>threads</th><th>seconds</th><th>least seconds</th><th>GFLOP/s</th><th>mfu</th>"
            "<th>roofline fraction</th></tr>")
    body = []
    for name in names:
        got = [e["step"] if name == "step" else e["phases"].get(name) for e in measured]
        got = [g for g in got if g]
        cells = [name, str(got[-1]["threads"]), cell(mean([g["seconds"] for g in got]), ".1f"),
                 cell(mean([g["least_seconds"] for g in got]), ".1f"), cell(mean([g["gflops_per_s"] for g in got]), ".1f"),
                 cell(mean([g["mfu"] for g in got]), ".2f"), cell(mean([g["roofline_fraction"] for g in got]), ".2f")]
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    last = measured[-1]
    peaks = ", ".join(f"{t} thread{'s' if t != '1' else ''}: {p['gflops']:.0f} GFLOP/s, {p['bandwidth_gb_s']:.1f} GB/s"
                      for t, p in last["peaks"].items())
    return (f"<p>Means over {len(measured)} steps, against the best this machine has reached in {html.escape(last['dtype'])}"
            f" ({html.escape(peaks)}; populora/peaks.py). mfu: FLOPs charged (spec 14) per second over that peak; "
            "roofline fraction: the least time the work allows (prompt passes at the peak, each decode step at the "
            "peak or reading every weight once, whichever is longer) over the time taken.</p>"
            f"<table>{head}{''.join(body)}</table>")
