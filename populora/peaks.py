"""The ceiling of this machine for the arithmetic a step is made of, measured in the calling process on its threads:
dense matrix products at the model's shapes (float32, and bfloat16 where the cores have it) and the rate at which
the cores read memory (what a decode step, which reads every weight once, waits on). populora/analysis/roofline.py
turns a ceiling and a phase's work into the fraction of it the phase reached.

A measurement taken while other processes share the cores comes out low, and a low ceiling flatters every fraction
measured against it; so each measurement is merged into the best this machine has reached before (`best_known`: the
highest of every figure, per host, CPU model, cores, threads, torch version and model shapes, in the populora
cache), and the fractions are taken against that. Each figure keeps the date it was measured; one older than
MAX_AGE_DAYS is dropped for the next measurement (a machine's firmware, kernel or neighbours change), and a cache file
that cannot be parsed is moved aside (logged) and started again. A run measures a short one once per process when
it starts (`quick`); `python -m bench.roofline` measures a longer one and reports it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import socket
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from populora.analysis.roofline import Ceiling
from populora.models import allowed_cpus, build_lock, cache_dir, torch_threads

log = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16")
# Rows of the measured products: a prompt group of the decoding loop holds up to 2,048 padded tokens and an update's
# micro-batch 1,024 (cpu-smol); oneDNN and MKL reach their speed from a few hundred rows on.
ROWS = (256, 1024)
QUICK_ROWS = (256,)
# A best figure older than this is not kept: the next measurement replaces it.
MAX_AGE_DAYS = 90
# The read measured for the bandwidth: the model's weights, but at least a buffer no cache level holds and at most
# what a quick measurement can afford to allocate.
MIN_READ_BYTES, MAX_READ_BYTES = 256 * 2**20, 1024 * 2**20


@dataclass(frozen=True)
class Shape:
    """One matrix product of a forward pass: (rows, d_in) x (d_in, d_out), `count` times per token."""

    d_out: int
    d_in: int
    count: int


def model_shapes(config) -> list[Shape]:
    """The dense products of one forward pass of a decoder-only transformer (a Hugging Face config: Llama, Qwen2,
    Mistral and their kin): per layer the q, k, v and o projections and the MLP's gate, up and down, and the LM head."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv = (getattr(config, "num_key_value_heads", None) or heads) * head_dim
    inter = config.intermediate_size
    return [Shape(heads * head_dim, hidden, layers), Shape(kv, hidden, 2 * layers), Shape(hidden, heads * head_dim, layers),
            Shape(inter, hidden, 2 * layers), Shape(hidden, inter, layers), Shape(config.vocab_size, hidden, 1)]


def shapes_key(shapes: Sequence[Shape]) -> str:
    return ",".join(f"{s.d_out}x{s.d_in}x{s.count}" for s in shapes)


@dataclass(frozen=True)
class Peaks:
    """The measured ceiling of `threads` threads on `device`: GFLOP/s of the model's products per dtype (None where
    the device has no fast path for it), and the read bandwidth in GB/s."""

    device: str
    threads: int
    cores: int  # the cores this process may run on
    gflops: dict[str, float | None]
    bandwidth_gb_s: float
    shapes: str = ""
    measurements: int = 1  # how many measurements the figures are the best of
    methods: dict[str, str] = field(default_factory=dict)  # dtype -> the product that reached the peak
    host: str = ""  # the machine's name
    measured_at: str = ""  # when the latest of the measurements was taken (UTC, ISO 8601)
    dates: dict[str, str] = field(default_factory=dict)  # figure (a dtype, or "bandwidth") -> when its best was taken

    def ceiling(self) -> Ceiling:
        """The roofline's figures: the peak of every dtype measured, and the bandwidth."""
        return Ceiling({d: g * 1e9 for d, g in self.gflops.items() if g}, self.bandwidth_gb_s * 1e9)

    def as_json(self) -> dict:
        return asdict(self)


def bf16_supported(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 matrices natively (AVX-512 BF16 or AMX on a CPU; Ampere on)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best_seconds(run, device: torch.device, repeats: int) -> float:
    run()  # warm-up: kernels chosen, weights laid out, pages touched
    best = math.inf
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        run()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def _products(shape: Shape, rows: int, dtype: torch.dtype, device: torch.device) -> dict[str, object]:
    """The ways the project multiplies such a matrix: F.linear (MKL or cuBLAS), and on a CPU in float32 the
    oneDNN-packed weight the inference path uses (populora/lora/prepack.py)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, shape.d_in, generator=gen).to(device=device, dtype=dtype)
    weight = torch.randn(shape.d_out, shape.d_in, generator=gen).to(device=device, dtype=dtype)
    out = {"linear": lambda: torch.nn.functional.linear(x, weight)}
    if device.type == "cpu" and dtype == torch.float32:
        from populora.lora.prepack import ROWS_HINT, supported

        if supported(weight) is None:
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, ROWS_HINT)
            out["onednn_packed"] = lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    return out


def matmul_gflops(shapes: Sequence[Shape], dtype: str, device: torch.device, rows: Sequence[int] = ROWS,
                  repeats: int = 3) -> tuple[float, str]:
    """GFLOP/s of one forward pass's products at `shapes` (each product's best time, weighted by its count per
    token), the best over `rows` and the product implementations; and which implementation that was."""
    best, how = 0.0, ""
    for n in rows:
        times: dict[str, float] = {}
        flops = 0.0
        for s in shapes:
            flops += 2.0 * n * s.d_in * s.d_out * s.count
            for name, run in _products(s, n, getattr(torch, dtype), device).items():
                times[name] = times.get(name, 0.0) + s.count * _best_seconds(run, device, repeats)
        for name, seconds in times.items():
            if flops / seconds / 1e9 > best:
                best, how = flops / seconds / 1e9, f"{name}, {n} rows"
    return best, how


def read_bandwidth(nbytes: int, device: torch.device, repeats: int = 3) -> float:
    """GB/s of reading `nbytes` (bounded to MIN_READ_BYTES..MAX_READ_BYTES) once: a sum over a float32 buffer."""
    n = max(MIN_READ_BYTES, min(MAX_READ_BYTES, nbytes)) // 4
    buf = torch.ones(n, dtype=torch.float32, device=device)
    seconds = _best_seconds(lambda: buf.sum(), device, repeats)
    return n * 4 / seconds / 1e9


def measure(shapes: Sequence[Shape], weight_bytes: int, threads: int = 0, device: str = "cpu",
            dtypes: Sequence[str] = DTYPES, quick: bool = False) -> Peaks:
    """The ceiling of `threads` torch threads (0: torch's setting as it is) on `device`: the model's products in each
    dtype the device multiplies natively, and the bandwidth of reading `weight_bytes`. `quick`: fewer rows and
    repeats, about a second for SmolLM2-135M on two cores, for a run to take at its start."""
    dev = torch.device(device)
    rows, repeats = (QUICK_ROWS, 2) if quick else (ROWS, 4)
    with torch_threads(threads if dev.type == "cpu" else 0), torch.inference_mode():
        used = torch.get_num_threads()
        gflops: dict[str, float | None] = {}
        methods = {}
        for dtype in dtypes:
            if dtype != "float32" and not bf16_supported(dev):
                gflops[dtype] = None
                continue
            gflops[dtype], methods[dtype] = matmul_gflops(shapes, dtype, dev, rows, repeats)
        bandwidth = read_bandwidth(weight_bytes, dev, repeats + 1)
    when = stamp()
    return Peaks(device=dev.type, threads=used if dev.type == "cpu" else 0, cores=len(allowed_cpus()),
                 gflops=gflops, bandwidth_gb_s=bandwidth, shapes=shapes_key(shapes), methods=methods,
                 host=socket.gethostname(), measured_at=when,
                 dates={**{d: when for d, g in gflops.items() if g}, "bandwidth": when})


def stamp(now: float | None = None) -> str:
    """A UTC date and time, ISO 8601, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))


def _age_days(date: str, now: float) -> float:
    """Days since `date` (a `stamp`); an unreadable or missing date is taken as too old to keep."""
    import calendar

    try:
        return (now - calendar.timegm(time.strptime(date, "%Y-%m-%dT%H:%M:%SZ"))) / 86400
    except (TypeError, ValueError):
        return math.inf


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key(peaks: Peaks) -> str:
    """What a ceiling is the ceiling of: the same host, CPU model (or GPU), cores, threads, torch and model shapes."""
    chip = torch.cuda.get_device_name() if peaks.device == "cuda" else cpu_model()
    return (f"{peaks.host or socket.gethostname()}|{chip}|{peaks.device}|cores={peaks.cores}|threads={peaks.threads}"
            f"|torch={torch.__version__}|{peaks.shapes}")


def merged(old: Peaks | None, new: Peaks) -> Peaks:
    """The higher of each figure of two measurements of the same machine key, each with the date it was taken."""
    if old is None:
        return new
    gflops, methods, dates = {}, {}, {}
    for dtype in set(old.gflops) | set(new.gflops):
        a, b = old.gflops.get(dtype), new.gflops.get(dtype)
        gflops[dtype] = None if a is None and b is None else max(x for x in (a, b) if x is not None)
        source = new if b is not None and (a is None or b >= a) else old
        if dtype in source.methods:
            methods[dtype] = source.methods[dtype]
        if dtype in source.dates:
            dates[dtype] = source.dates[dtype]
    source = new if new.bandwidth_gb_s >= old.bandwidth_gb_s else old
    if "bandwidth" in source.dates:
        dates["bandwidth"] = source.dates["bandwidth"]
    return Peaks(device=new.device, threads=new.threads, cores=new.cores, gflops=gflops,
                 bandwidth_gb_s=source.bandwidth_gb_s, shapes=new.shapes,
                 measurements=old.measurements + new.measurements, methods=methods, host=new.host,
                 measured_at=max(old.measured_at, new.measured_at), dates=dates)


def fresh(old: Peaks, now: float | None = None, max_age_days: float = MAX_AGE_DAYS) -> Peaks | None:
    """`old` without the figures measured more than `max_age_days` ago (None when none is left)."""
    now = time.time() if now is None else now
    keep = {k for k, d in old.dates.items() if _age_days(d, now) <= max_age_days}
    gflops = {d: (g if d in keep else None) for d, g in old.gflops.items()}
    if "bandwidth" not in keep and not any(gflops.values()):
        return None
    return Peaks(device=old.device, threads=old.threads, cores=old.cores, gflops=gflops,
                 bandwidth_gb_s=old.bandwidth_gb_s if "bandwidth" in keep else 0.0, shapes=old.shapes,
                 measurements=old.measurements, methods={d: m for d, m in old.methods.items() if d in keep},
                 host=old.host, measured_at=old.measured_at, dates={k: old.dates[k] for k in keep})


def _read(path: Path) -> dict[str, Peaks]:
    """The stored figures by machine key; a file that does not parse as such is moved aside (logged), and none are
    returned, so this measurement starts it again."""
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict):
            raise TypeError(f"a JSON object was expected, got {type(raw).__name__}")
        return {key: Peaks(**entry) for key, entry in raw.items()}
    except (ValueError, TypeError) as e:
        aside = path.with_name(f"{path.name}.corrupt-{stamp().replace(':', '')}")
        path.replace(aside)
        log.warning("the machine's best known peaks at %s could not be read (%s): moved aside to %s, and started "
                    "again from this measurement", path, e, aside)
        return {}


def best_known(new: Peaks, cache: str = "", now: float | None = None) -> Peaks:
    """`new` merged into the best figures this machine key has reached within MAX_AGE_DAYS (the populora cache's
    peaks.json), which is written back; the merged figures. A file that cannot be parsed is moved aside and written
    again; a cache that cannot be read or written at all leaves `new` as it is (logged)."""
    path = cache_dir(cache) / "peaks.json"
    key = machine_key(new)
    try:
        with build_lock(path):
            known = _read(path)
            old = known.get(key)
            kept = fresh(old, now) if old is not None else None
            if old is not None and kept != old:
                log.info("peaks of %s measured more than %d days ago are dropped for this measurement", key,
                         MAX_AGE_DAYS)
            best = merged(kept, new)
            # other keys' entries stay while any of their figures is fresh (entries from before dates: none is)
            known = {k: p for k, p in known.items() if k != key and fresh(p, now) is not None}
            known[key] = best
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps({k: p.as_json() for k, p in known.items()}, indent=1, sort_keys=True))
            tmp.replace(path)
            return best
    except OSError as e:
        log.warning("the machine's best known peaks could not be read or written at %s (%s): using this "
                    "measurement alone", path, e)
        return new
