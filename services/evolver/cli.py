"""`populora evolve`: make one child adapter by hand from PEFT adapter directories, with one operator."""

from __future__ import annotations

import argparse
import json
import math
import sys
from contextlib import ExitStack
from pathlib import Path

from populora import names
from populora.config import ConfigError, load_config
from services.evolver.adapters import EvolverError, open_parent, write_adapter_dir
from services.evolver.breed import breed


def parse_params(items: list[str]) -> dict[str, float]:
    """`name=value` pairs -> {name: float(value)}; errors name the bad item."""
    out: dict[str, float] = {}
    for item in items or []:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise EvolverError(f"--param {item!r} is not of the form name=value (e.g. --param epsilon=0.05)")
        try:
            out[name.strip()] = float(raw)
        except ValueError:
            raise EvolverError(f"--param {item!r}: {raw!r} is not a number") from None
    return out


def run(args: argparse.Namespace) -> dict:
    """Breed and write the child; returns the JSON summary. Raises EvolverError / ConfigError on bad input."""
    cfg = load_config(preset=getattr(args, "preset", None), path=getattr(args, "config_file", None),
                      overrides=getattr(args, "overrides", None) or [])
    params = parse_params(getattr(args, "param", []))
    out = Path(args.out)
    # the directory's name is the child's adapter id (written into its meta.json): the rule of every id
    names.check_adapter_id(out.name, f"--out {args.out!r} (the child's id is the directory's name, {out.name!r})")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise EvolverError(f"--out {out} exists and is not an empty directory; choose a new path")
    with ExitStack() as stack:
        parents = []
        for path in args.parents:
            parent = open_parent(path)
            stack.callback(parent.close)
            parents.append(parent)
        child = breed(parents, args.operator, params, int(args.seed), cfg.evolution)
    written = write_adapter_dir(out, child.weights, child.config,
                                {"adapter_id": out.name, **child.meta([str(Path(p).resolve()) for p in args.parents])})
    return {"child": str(written), "operator": child.operator, "seed": child.seed, "epsilon": child.epsilon,
            "params": child.params, "rank": int(child.config["r"]), "relative_change": _finite(child.relative_change),
            "effective_rank": child.effective_rank, "seconds": round(child.seconds, 4),
            "stats": {k: _finite(v) for k, v in child.stats.items()}}


def _finite(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def main(args: argparse.Namespace) -> int:
    """Print a JSON summary of the child; on bad input print the reason, write nothing and return 2."""
    try:
        summary = run(args)
    except (EvolverError, ConfigError, names.InvalidName) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 0
