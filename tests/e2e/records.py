"""A seeded run's records, in a form that can be kept in the repository and compared: every phase result the
journal holds, and the league's adapters and lineage, with what a clock measured left out.

`tests/e2e/golden/cpu_tiny_records.json` holds the records of the seeded `cpu-tiny` run of
`test_population_run_agrees_with_itself`. A refactor must not change what a user's run produces, so that test
compares its run with the file. Where a change is meant to change the records (a new phase field, another sampling
rule), write the file again with `POPULORA_UPDATE_GOLDEN=1 pytest tests/e2e/test_embedded.py -k agrees` and say why
in the commit.

Long token-id lists are kept as a SHA-256 of their values (exact, but small); floats are compared with a relative
tolerance of 1e-6, since the last bits of a sum may differ between CPUs while the run's decisions do not.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import sqlalchemy as sa

GOLDEN = Path(__file__).parent / "golden" / "cpu_tiny_records.json"
CLOCK_KEYS = {"seconds", "fit_seconds", "wall_s", "started_at", "finished_at", "created_at", "updated_at"}
LONG_LIST = 16


def _normal(value):
    if isinstance(value, dict):
        return {str(k): _normal(v) for k, v in sorted(value.items()) if k not in CLOCK_KEYS}
    if isinstance(value, (list, tuple)):
        if len(value) > LONG_LIST and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return f"sha256:{len(value)}:" + hashlib.sha256(json.dumps(list(value)).encode()).hexdigest()
        return [_normal(v) for v in value]
    return value


def run_records(state, league_db_url: str, run_id: str) -> dict:
    """The run's phase results (by "step/phase") and its league rows, clock readings left out."""
    phases = {f"{r['step']}/{r['phase']}": state.get(run_id, r["step"], r["phase"]) for r in state.phase_rows(run_id)}
    engine = sa.create_engine(league_db_url)
    try:
        with engine.connect() as c:
            adapters = [dict(r._mapping) for r in c.execute(sa.text(
                "SELECT adapter_id, role, status, mu, sigma, wins, losses, draws, matches, parents_json, operator"
                " FROM league_adapters WHERE run_id = :r ORDER BY adapter_id"), {"r": run_id})]
            lineage = [dict(r._mapping) for r in c.execute(sa.text(
                "SELECT parent_id, child_id, operator, step FROM league_lineage WHERE run_id = :r"
                " ORDER BY child_id, parent_id"), {"r": run_id})]
    finally:
        engine.dispose()
    return _normal(json.loads(json.dumps({"phases": phases, "adapters": adapters, "lineage": lineage},
                                         default=str)))


def differences(expected, got, path: str = "", out: list[str] | None = None, limit: int = 20) -> list[str]:
    """Where `got` departs from `expected`: a path and both values per difference (at most `limit`)."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(expected, dict) and isinstance(got, dict):
        for k in sorted(set(expected) | set(got)):
            if k not in got or k not in expected:
                out.append(f"{path}/{k}: {'missing' if k not in got else 'unexpected'}")
            else:
                differences(expected[k], got[k], f"{path}/{k}", out, limit)
    elif isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            out.append(f"{path}: {len(expected)} items expected, {len(got)} got")
        for i, (e, g) in enumerate(zip(expected, got)):
            differences(e, g, f"{path}[{i}]", out, limit)
    elif (isinstance(expected, float) or isinstance(got, float)) and not isinstance(expected, bool) \
            and isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        if not math.isclose(expected, got, rel_tol=1e-6, abs_tol=1e-9):
            out.append(f"{path}: {expected!r} expected, {got!r} got")
    elif expected != got:
        out.append(f"{path}: {expected!r} expected, {got!r} got")
    return out
