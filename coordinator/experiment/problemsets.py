"""An experiment's problem sets: per benchmark, the problems answered by generation and scored pass@1
(`eval.pass_problems`) and those whose reference answer's likelihood is scored (`eval.likelihood_problems`, task
benchmarks only: populora.evals.likelihood), each a seeded subset fixed in one file before anything is scored, the
same for every seed, version and shard of the experiment.

The file (`problems.json`: under the results directory of a sharded experiment, committed with its first shard; else
under the experiment's directory) lists the problem ids in the order they are scored; the validation fifth and the
curve's first `eval.curve_limit` problems are taken in that order. A subset is a seeded sample (`eval.subset_seed`)
of the benchmark's problems that are not set apart, so the same file comes out of the same settings and data. Once
the file exists it is the truth: settings that would draw other subsets are refused rather than redrawn.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path

from populora.config import Config, ConfigError
from populora.evals import BENCHMARKS
from populora.seeds import derive_seed

PROBLEMS_FILE = "problems.json"
KINDS = ("pass", "likelihood")


def enabled(cfg: Config) -> bool:
    """Whether the experiment scores fixed subsets (either size set); without, every problem (or --limit) is pass@1
    scored and nothing is likelihood scored, as before problem sets."""
    return bool(cfg.eval.pass_problems or cfg.eval.likelihood_problems)


def settings(cfg: Config, limit: int | None) -> dict:
    """What decides the subsets besides the benchmarks' data: their sizes, seed, the held-out generator's seed and
    the limit the full lists are cut to."""
    e = cfg.eval
    return {"pass_problems": e.pass_problems, "likelihood_problems": e.likelihood_problems, "seed": e.subset_seed,
            "heldout_seed": e.heldout_seed, "limit": limit}


def likelihood_scored(benchmark: str) -> bool:
    """A benchmark whose problems have a reference answer to score: the task benchmarks (heldout, CRUXEval-O/-I)."""
    return BENCHMARKS[benchmark].kind == "task"


def draw(ids: list[str], size: int, seed: int, benchmark: str) -> list[str]:
    """`size` of `ids` (all when fewer), in a seeded random order: the same ids, size, seed and benchmark give the
    same list."""
    return random.Random(derive_seed("problem-sets", seed, benchmark)).sample(ids, min(size, len(ids)))


def make(cfg: Config, limit: int | None, benchmarks: list[str], problems_of: Callable[[str], list]) -> dict:
    """The problem sets of `benchmarks`; `problems_of(benchmark)` gives its full problem list (the held-out
    benchmark as generated, a published one as its file holds it)."""
    e = cfg.eval
    out: dict = {"settings": settings(cfg, limit), "benchmarks": {}}
    for b in benchmarks:
        problems = problems_of(b)
        ids = [p.id for p in problems if not p.set_apart]
        order = draw(ids, max(e.pass_problems, e.likelihood_problems) or len(ids), e.subset_seed, b)
        entry = {"of": len(problems), "set_apart": len(problems) - len(ids),
                 "pass": order[:e.pass_problems] if e.pass_problems else [p.id for p in problems]}
        if e.likelihood_problems and likelihood_scored(b):
            entry["likelihood"] = order[:e.likelihood_problems]
        out["benchmarks"][b] = entry
    return out


def digest(sets: dict) -> str:
    """A short digest of the sets (their ids in order): an evaluation made with other sets is redone."""
    return hashlib.sha256(json.dumps(sets["benchmarks"], sort_keys=True).encode()).hexdigest()[:16]


def ensure(path: Path, cfg: Config, limit: int | None, benchmarks: list[str],
           problems_of: Callable[[str], list]) -> dict:
    """The problem sets at `path`, made and written when the file is not there; a file made with other settings is
    refused (ConfigError) and a benchmark it lacks is added to it."""
    want = settings(cfg, limit)
    if path.exists():
        sets = json.loads(path.read_text())
        if sets.get("settings") != want:
            raise ConfigError(f"the problem sets in {path} were drawn with {sets.get('settings')}, not {want}: score "
                              "with the settings they were drawn with (eval.pass_problems, eval.likelihood_problems, "
                              "eval.subset_seed, eval.heldout_seed, --limit), or move the file and start again")
        missing = [b for b in benchmarks if b not in sets["benchmarks"]]
        if not missing:
            return sets
        sets["benchmarks"].update(make(cfg, limit, missing, problems_of)["benchmarks"])
    else:
        sets = make(cfg, limit, benchmarks, problems_of)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(sets, indent=1) + "\n")
    tmp.replace(path)
    return sets


def subset(sets: dict | None, benchmark: str, kind: str) -> list[str] | None:
    """The ids of `benchmark`'s `kind` set (pass | likelihood) in order; None without problem sets, or for a
    likelihood set the benchmark does not have."""
    if kind not in KINDS:
        raise ValueError(f"problem set kind {kind!r}: allowed {list(KINDS)}")
    if sets is None:
        return None
    return sets["benchmarks"].get(benchmark, {}).get(kind)
