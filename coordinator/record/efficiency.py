"""Each step's phases against what the machine could do: a phase's useful executed FLOPs (spec 14, revised; counted
from the model's shapes by populora/analysis/work.py) at the measured peak of the precision each runs in, over the
time it took (`mfu`), and the least time the roofline allows its work over that time (`roofline_fraction`;
populora/analysis/roofline.py). The charged FLOPs (2N, 6N: the budget) are reported beside them as `flops`.
metrics.jsonl carries them as `efficiency`, the report and the dashboard show them.

The ceiling is measured in the coordinator's own process, which in embedded mode is the one the services compute in,
once per process at the run's start (populora/peaks.py, short) for every thread count the phases use, and merged
into the best this machine has reached before: a measurement taken while other jobs share the cores is low, and
would flatter every fraction. In distributed mode the phases run elsewhere, on machines this process cannot measure,
so the fractions are left out.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from coordinator.run.modelsize import model_shapes
from coordinator.run.phases.accounting import budget_flops, charged_rows
from coordinator.run.phases.update import rollouts
from populora.analysis.roofline import (
    Ceiling,
    compute_seconds,
    decode_count,
    fraction,
    generation_seconds,
    prompts_count,
)
from populora.analysis.work import Completion, Count, Precision, Shapes, update
from populora.config import Config

log = logging.getLogger(__name__)

GENERATION_PHASES = ("propose", "solve")


@dataclass(frozen=True)
class UpdateSettings:
    """What an update's passes depend on besides its rows: the rewards (which rows it trains, spec 5), the entropy
    bonus (every row), the epochs, and activation checkpointing (each layer's forward again)."""

    rewards: object
    entropy_coef: float = 0.0
    epochs: int = 1
    checkpointing: bool = False


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
    """The dtype the model computes in (model.dtype, `auto` resolved for the device)."""
    from populora.models import _device, _dtype

    return str(_dtype(cfg.model.dtype, _device(cfg.model.device))).removeprefix("torch.")


@functools.lru_cache(maxsize=4)
def _measured(shapes: Shapes, cache: str, device: str, dtypes: tuple[str, ...], threads: tuple[int, ...]
              ) -> dict[int, dict]:
    """{threads: {"gflops": {dtype: GFLOP/s}, "bandwidth_gb_s"}} for the model's products in `dtypes`, the best this
    machine has reached (populora.peaks.best_known), measured once per process."""
    from populora.peaks import Shape, best_known, measure

    products = [Shape(d_out, d_in, shapes.layers) for d_in, d_out in shapes.projections().values()]
    products.append(Shape(shapes.vocab, shapes.hidden, 1))
    weight_bytes = 4 * (shapes.projection_params() + shapes.head_params())
    out = {}
    for n in threads:
        peaks = best_known(measure(products, weight_bytes, n, device, dtypes=dtypes, quick=True), cache)
        out[n] = {"gflops": {d: g for d, g in peaks.gflops.items() if g}, "bandwidth_gb_s": peaks.bandwidth_gb_s}
    return out


def run_ceilings(cfg: Config) -> dict | None:
    """What `efficiency` measures a run's phases against: the phases' threads, the precision its products run in,
    the ceiling per thread count, the model's shapes and the update's settings; None in distributed mode, or where
    the ceiling cannot be measured (it is a report, not a reason to stop a run)."""
    if cfg.run.deployment != "embedded":
        return None
    threads = phase_threads(cfg)
    dtype = compute_dtype(cfg)
    low = cfg.model.base_matmul == "bfloat16"
    try:
        from populora.models import _device

        device = _device(cfg.model.device).type
        shapes = model_shapes(cfg)
        dtypes = tuple(dict.fromkeys(("float32", dtype, *(("bfloat16",) if low else ()))))
        peaks = _measured(shapes, cfg.model.cache_dir, device, dtypes, tuple(sorted(set(threads.values()))))
    except (OSError, RuntimeError, ValueError) as e:
        log.warning("the machine's peak could not be measured (%s): the steps' metrics leave out their efficiency", e)
        return None
    # bfloat16 products only where the cores have them (populora/lora/prepack.py falls back to the model's dtype)
    base = "bfloat16" if low and all("bfloat16" in p["gflops"] for p in peaks.values()) else dtype
    unmeasured = sorted({d for d in (base, dtype) for p in peaks.values() if d not in p["gflops"]})
    if unmeasured:
        log.warning("no peak measured for %s products on this device: the steps' metrics leave out their efficiency",
                    ", ".join(unmeasured))
        return None
    t = cfg.trainer
    return {"threads": threads, "precision": Precision(base=base, model=dtype), "peaks": peaks, "shapes": shapes,
            "update": UpdateSettings(cfg.rewards, t.entropy_coef, t.epochs, t.activation_checkpointing)}


def _ceiling(ceilings: dict, phase: str) -> Ceiling:
    """The ceiling of the threads `phase` ran on: each measured precision's peak and the bandwidth."""
    p = ceilings["peaks"][ceilings["threads"][phase]]
    return Ceiling({d: g * 1e9 for d, g in p["gflops"].items()}, p["bandwidth_gb_s"] * 1e9)


def _unique_prompts(items: Iterable[tuple[str, list[int]]]) -> list[tuple[str, list[int]]]:
    """The prompts a prompt pass must run: a prompt the same adapter reads twice (a request's n samples) once."""
    return list({(a, tuple(p)): (a, p) for a, p in items}.values())


def phase_work(record, ceilings: dict, ranks: Mapping[str, int] | None = None) -> dict[str, tuple[Count, float]]:
    """Per computing phase of a step, its useful executed FLOPs and the least time the roofline allows them."""
    shapes: Shapes = ceilings["shapes"]
    precision: Precision = ceilings["precision"]
    settings: UpdateSettings = ceilings["update"]

    def rank(adapter: str) -> int:
        return ranks[adapter] if ranks is not None else shapes.rank

    def ceiling(phase: str) -> Ceiling:
        return _ceiling(ceilings, phase)

    out = {}
    for name, items in (("propose", [(p.teacher, p.prompt_token_ids, p.response_token_ids)
                                     for p in record.proposed.proposals]),
                        ("solve", [(a.student, a.prompt_token_ids, a.response_token_ids)
                                   for a in record.solved.attempts])):
        if not items:
            continue
        prompts = [(len(p), rank(a)) for a, p in _unique_prompts((a, p) for a, p, _ in items)]
        rows = [Completion(len(p), len(r), a, rank(a)) for a, p, r in items]
        count = prompts_count(shapes, prompts) + decode_count(shapes, rows, precision)
        out[name] = count, generation_seconds(shapes, prompts, [rows], precision, ceiling(name))
    batch = rollouts(settings.rewards, record.proposed, record.validated, record.solved, record.checked)
    count = Count()
    for adapter, rows in batch.items():
        if adapter in record.updated.stats:
            trained = [(len(r.prompt_token_ids), len(r.response_token_ids))
                       for r in charged_rows(rows, settings.entropy_coef)]
            count = count + update(shapes, trained, settings.checkpointing, rank(adapter)).times(settings.epochs)
    out["update"] = count, compute_seconds(count, precision, ceiling("update"))
    return out


def efficiency(record, row: dict, ceilings: dict | None, ranks: Mapping[str, int] | None = None) -> dict:
    """metrics.jsonl's `efficiency` for a training step: per computing phase its threads, charged FLOPs (`flops`),
    useful executed FLOPs and those recomputed, seconds, useful GFLOP/s, mfu, least seconds on the roofline and
    roofline_fraction; the same for the whole step as `step` (its window when steps overlap). `ranks`: each
    adapter's rank (None: lora.rank). {} without ceilings."""
    if ceilings is None:
        return {}
    precision: Precision = ceilings["precision"]
    threads, peaks = ceilings["threads"], ceilings["peaks"]

    def ceiling(phase: str) -> Ceiling:
        return _ceiling(ceilings, phase)

    spent = record.spent.phases
    seconds = row["seconds"]
    work = phase_work(record, ceilings, ranks)
    phases = {}
    for name in (*GENERATION_PHASES, "update"):
        if name not in spent or name not in work or not seconds.get(name):
            continue
        count, least = work[name]
        phases[name] = {"threads": threads[name], "flops": spent[name].flops, "useful_flops": count.useful,
                        "recomputed_flops": count.recomputed, "seconds": seconds[name],
                        "gflops_per_s": count.useful / seconds[name] / 1e9,
                        "mfu": fraction(compute_seconds(count, precision, ceiling(name)), seconds[name]),
                        "least_seconds": least, "roofline_fraction": fraction(least, seconds[name])}
    step_s = row.get("window_s") or row["step_seconds"]
    useful = sum((work[p][0] for p in phases), Count())
    least = sum(p["least_seconds"] for p in phases.values())
    return {"efficiency": {
        "dtype": precision.base,
        "peaks": {str(t): {"gflops": p["gflops"].get(precision.base), "bandwidth_gb_s": p["bandwidth_gb_s"],
                           "gflops_by_dtype": p["gflops"]} for t, p in sorted(peaks.items())},
        "phases": phases,
        "step": {"threads": threads["step"], "flops": budget_flops(record.spent), "useful_flops": useful.useful,
                 "recomputed_flops": useful.recomputed, "seconds": step_s,
                 "gflops_per_s": useful.useful / step_s / 1e9 if step_s else None,
                 "mfu": fraction(compute_seconds(useful, precision, ceiling("step")), step_s),
                 "least_seconds": least, "roofline_fraction": fraction(least, step_s)}}}


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
            f" ({html.escape(peaks)}; populora/peaks.py). GFLOP/s and mfu: the useful executed FLOPs (spec 14, revised: "
            "the products the work needs, counted from the model's shapes; not the charged 2N and 6N) per second, "
            "and the time the peak of each product's precision allows them over the time taken; roofline "
            "fraction: the least time the work allows (prompt passes and updates at the peak, each decode step at "
            "the peak or reading every weight and its KV cache once, whichever is longer) over the time taken.</p>"
            f"<table>{head}{''.join(body)}</table>")
