"""What every benchmark shares, so each bench module holds only its workload: timing, the machine's load, memory
figures, child processes that answer in JSON, and printing the figures (each as it is taken, then the whole object).

A benchmark on a shared machine measures the other jobs as much as its own code. The load average printed beside
each result, the processor time next to the wall time and the fastest of repeated rounds (every side in turn, so a
change in the machine's speed weighs on each alike) are how the figures stay comparable from run to run.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------- the machine


def load_average() -> float:
    """The 1-minute load average, to 2 decimals: how busy the machine was beside the figures it is printed with."""
    return round(os.getloadavg()[0], 2)


def load_averages() -> list[float]:
    """The 1-, 5- and 15-minute load averages, to 2 decimals."""
    return [round(x, 2) for x in os.getloadavg()]


def cores() -> int:
    """The machine's logical cores (1 when Python cannot tell)."""
    return os.cpu_count() or 1


# ---------------------------------------------------------------- timing


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """(wall seconds, result) of one call."""
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def best_of(repeats: int, sides: dict[str, Callable[[], Any]],
            sync: Callable[[], None] = lambda: None) -> dict[str, float]:
    """Each side once untimed (the warm-up: exactly the timed call), then `repeats` timed rounds in turn (so drift
    hits every side alike); the fastest round of each side. `sync` waits for queued work (a CUDA device's) around
    every timing, so a side is charged for what it launched and nothing else."""
    for run in sides.values():
        run()
    best = {name: math.inf for name in sides}
    for _ in range(repeats):
        for name, run in sides.items():
            sync()
            start = time.perf_counter()
            run()
            sync()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def quantile(values: Iterable[float], q: float) -> float:
    """The value at rank round(q * (n - 1)) of the sorted values (q = 0.99: the p99)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def process_cpu_s(procs: Iterable[Any]) -> float:
    """CPU seconds of processes (psutil processes, or anything with a `pid`, or pids) and of the children they
    reaped; one that has exited since is skipped."""
    import psutil

    total = 0.0
    for p in procs:
        try:
            t = psutil.Process(p.pid if hasattr(p, "pid") else p).cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            continue
    return total


# ---------------------------------------------------------------- memory


def rss_mb(trim: bool = False) -> float:
    """This process's resident set in MiB. With `trim`, garbage is collected and glibc gives freed heap pages
    back first, so the figure shows what is held rather than what was once used."""
    import psutil

    if trim:
        gc.collect()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            pass
    return psutil.Process().memory_info().rss / 2**20


def status_mb(field: str) -> float:
    """A size field of /proc/self/status (VmRSS, VmHWM, ...) in MiB; NaN where there is no such file or field."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return float("nan")
    for line in lines:
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    """This process's peak resident set in MiB (VmHWM; getrusage's maximum where there is no /proc)."""
    peak = status_mb("VmHWM")
    if not math.isnan(peak):
        return peak
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak() -> None:
    """Start the peak over from the current resident set (after collecting garbage and trimming the heap), so the
    next peak_mb() is the peak of what runs in between. Not Linux: the peak then includes what ran before."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
    except OSError:
        pass


# ---------------------------------------------------------------- workloads


def random_adapters(store, model, targets: list[str], rank: int | list[int], n: int, prefix: str,
                    base_model: str = "", meta: dict | None = None, dtype=None) -> list:
    """`n` random LoRA adapters of `rank` (or of ranks[i % len], a population of mixed ranks) on `targets` of
    `model`, saved to `store` as <prefix><i> (seed i, both factors nonzero with std 0.01, alpha 2 x rank, in `dtype`
    when given); their refs. A bench that compares engines or modes gives each the same adapters, and a second run
    the same ones again."""
    from populora.lora import random_lora_weights
    from populora.store import lora_config_dict

    ranks = rank if isinstance(rank, list) else [rank]
    refs = []
    for i in range(n):
        r = ranks[i % len(ranks)]
        weights = random_lora_weights(model, targets, r, seed=i, std=0.01)
        if dtype is not None:
            weights = {key: t.to(dtype) for key, t in weights.items()}
        refs.append(store.save(f"{prefix}{i}", weights, lora_config_dict(r, 2.0 * r, targets, base_model), meta=meta))
    return refs


# ---------------------------------------------------------------- child processes


class ChildFailed(RuntimeError):
    """A benchmark's child process exited non-zero; `stderr` is what it wrote there."""

    def __init__(self, what: str, stderr: str, tail: int):
        super().__init__(f"{what} failed:\n{stderr[-tail:]}")
        self.stderr = stderr


def run_json(cmd: list[str], what: str, *, env: dict[str, str] | None = None, cwd: Path | None = None,
             timeout: float | None = None, tail: int = 3000) -> dict:
    """Run a child (a measurement that needs a fresh process: its own peak memory, its own imports, another
    virtualenv) and read the JSON object on its last line of stdout. A child that fails raises ChildFailed, with
    the last `tail` characters of its stderr."""
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=cwd, timeout=timeout)
    if done.returncode != 0:
        raise ChildFailed(what, done.stderr, tail)
    return json.loads(done.stdout.strip().splitlines()[-1])


def module_command(module: str, *args: str, python: str = sys.executable) -> list[str]:
    """`python -m <module> <args>`, with this interpreter unless `python` names another (another virtualenv's)."""
    return [python, "-m", module, *args]


# ---------------------------------------------------------------- the command line


def update_workload_parser(doc: str | None, json_help: str, *, rollouts_help: str, tokens_help: str
                           ) -> argparse.ArgumentParser:
    """The arguments every bench of adapter updates takes (--json, the model, the population, LoRA rank and the
    rollouts each adapter trains on); the bench adds its own."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--adapters", type=int, default=8)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--rollouts", type=int, default=2, help=rollouts_help)
    p.add_argument("--tokens", type=int, default=128, help=tokens_help)
    return p


# ---------------------------------------------------------------- printing the figures


class Reporter:
    """Collects the figures; prints each as one JSON line when it is taken (stderr, and `jsonl` when given), so a
    run cut short still leaves what it measured. Floats are rounded to `digits` decimals (at least four significant
    figures)."""

    def __init__(self, jsonl: str | None = None, digits: int = 4):
        self.out: dict[str, Any] = {}
        self.digits = digits
        self.jsonl = Path(jsonl) if jsonl else None
        if self.jsonl is not None:
            self.jsonl.write_text("")  # this run's figures only

    def __call__(self, key: str, value: Any) -> None:
        if isinstance(value, float):
            value = rounded(value, self.digits)
        self.out[key] = value
        line = json.dumps({key: value})
        print(line, file=sys.stderr, flush=True)
        if self.jsonl is not None:
            with self.jsonl.open("a") as f:
                f.write(line + "\n")


def progress(bench: str, what: str, value: Any) -> None:
    """One line on stderr for a person watching a long run: `bench.<name>: what = value`."""
    print(f"{bench}: {what} = {value}", file=sys.stderr, flush=True)


def rounded(value: float, digits: int) -> float:
    """`value` to `digits` decimals, but never fewer than four significant figures: a small fraction (0.04455) keeps
    the precision a ratio of it needs, where rounding to decimals alone would leave 0.045 or 0.0."""
    if not math.isfinite(value) or value == 0:
        return value
    return round(value, max(digits, 3 - math.floor(math.log10(abs(value)))))


def emit(out: dict, indent: int | None = None, digits: int | None = None) -> None:
    """Print the result object on stdout, the last line a caller parses; with `digits`, its floats rounded
    (`rounded`: decimals, at least four significant figures)."""
    if digits is not None:
        out = {k: rounded(v, digits) if isinstance(v, float) else v for k, v in out.items()}
    print(json.dumps(out, indent=indent))
