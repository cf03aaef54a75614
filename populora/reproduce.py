"""Whether a run reproduced another: its records without what differs from run to run whatever the seed (clock
readings), and where two runs' records depart (the end-to-end tests and bench.pipeline compare seeded runs so)."""

from __future__ import annotations

import hashlib
import json
import math

# What two runs of one seed are not compared on: what a clock or the kernel measured (different in every run), and
# whether the warm start's fit was made by this run or found in the machine's cache (its weights are the same either
# way; a second run finds the first one's). A new field of that kind goes here, or every comparison reports it.
NOT_COMPARED = frozenset({"seconds", "fit_seconds", "sandbox_cpu_seconds", "wall_s", "started_at", "finished_at",
                          "created_at", "updated_at", "served_ms", "cached"})


def normal(value, digest_over: int | None = None):
    """`value` (JSON-like: dicts, lists, scalars) without the keys of NOT_COMPARED, its keys as strings, sorted; a list
    of more than `digest_over` integers (token ids) as a SHA-256 of its values, exact but small."""
    if isinstance(value, dict):
        return {str(k): normal(v, digest_over) for k, v in sorted(value.items()) if k not in NOT_COMPARED}
    if isinstance(value, (list, tuple)):
        if digest_over is not None and len(value) > digest_over \
                and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return f"sha256:{len(value)}:" + hashlib.sha256(json.dumps(list(value)).encode()).hexdigest()
        return [normal(v, digest_over) for v in value]
    return value


def differences(expected, got, path: str = "", out: list[str] | None = None, limit: int = 20,
                rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> list[str]:
    """Where `got` departs from `expected`: a path and both values per difference (at most `limit`). Floats are
    equal within `rel_tol` / `abs_tol` (0 and 0: bit for bit)."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(expected, dict) and isinstance(got, dict):
        for k in sorted(set(expected) | set(got)):
            if k not in got or k not in expected:
                out.append(f"{path}/{k}: {'missing' if k not in got else 'unexpected'}")
            else:
                differences(expected[k], got[k], f"{path}/{k}", out, limit, rel_tol, abs_tol)
    elif isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            out.append(f"{path}: {len(expected)} items expected, {len(got)} got")
        for i, (e, g) in enumerate(zip(expected, got)):
            differences(e, g, f"{path}[{i}]", out, limit, rel_tol, abs_tol)
    elif (isinstance(expected, float) or isinstance(got, float)) and not isinstance(expected, bool) \
            and isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        if not math.isclose(expected, got, rel_tol=rel_tol, abs_tol=abs_tol):
            out.append(f"{path}: {expected!r} expected, {got!r} got")
    elif expected != got:
        out.append(f"{path}: {expected!r} expected, {got!r} got")
    return out[:limit]


def first_difference(expected: dict, got: dict, rel_tol: float = 0.0, abs_tol: float = 0.0) -> str | None:
    """The first record of `got` (records by name, in the order the run made them: "step/phase") that departs
    from `expected`'s, with the first path inside it that differs and both values; None when none does."""
    for name, record in expected.items():
        if name not in got:
            return f"{name}: missing"
        found = differences(record, got[name], name, limit=1, rel_tol=rel_tol, abs_tol=abs_tol)
        if found:
            return found[0]
    extra = next((name for name in got if name not in expected), None)
    return f"{extra}: unexpected" if extra else None
