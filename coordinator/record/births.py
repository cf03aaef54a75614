"""How children start (spec 9: an operator injects diversity while keeping what the parents know): each child's rate
on its first step against its parent's on the step it was born, from a run's metrics rows.

A student's rate is its solve rate (`student_solve_rate`); a teacher's is the share of its proposals that were valid
(its programs in `valid_programs` over the proposals a teacher wrote that step: the step's proposals, from
`task_types`, over its teachers). The parent compared is a mutation's
only one, a crossover's first. A rate the metrics do not have (a student given no task, a run before these fields)
is None.
"""

from __future__ import annotations

import html
from statistics import mean


def _rate(row: dict, adapter: str, role: str) -> float | None:
    if role == "student":
        return row.get("student_solve_rate", {}).get(adapter)
    teachers = sum(m.get("role") == "teacher" for m in row.get("population", {}).values())
    proposals = sum(t.get("proposals", 0) for t in row.get("task_types", {}).values())
    if "valid_programs" not in row or not teachers or not proposals:
        return None
    return sum(p.get("teacher") == adapter for p in row["valid_programs"]) / (proposals / teachers)


def birth_rates(rows: list[dict]) -> list[dict]:
    """One entry per child: the step it was born (its event's row), child, parent, role, operator, relative change,
    the parent's rate on the birth step and the child's on the next step, and their difference."""
    by_step = {r["step"]: r for r in rows}
    out = []
    for row in rows:
        for e in row.get("evolution", []):
            child, parent = e["child"], (e.get("parents") or [None])[0]
            after = by_step.get(row["step"] + 1)
            role = ((after or {}).get("population", {}).get(child, {}).get("role")
                    or row.get("population", {}).get(parent, {}).get("role"))
            parent_rate = _rate(row, parent, role) if parent and role else None
            child_rate = _rate(after, child, role) if after and role else None
            out.append({"step": row["step"], "child": child, "parent": parent, "role": role,
                        "operator": e.get("operator"), "relative_change": e.get("relative_change"),
                        "parent_rate": parent_rate, "child_rate": child_rate,
                        "difference": None if parent_rate is None or child_rate is None
                        else child_rate - parent_rate})
    return out


def summarise(births: list[dict]) -> dict:
    """{operator: {role: {n, mean parent rate, mean child rate, mean difference, mean relative change}}} over the
    births whose two rates are known."""
    out: dict[str, dict[str, dict]] = {}
    for b in births:
        if b["difference"] is None:
            continue
        out.setdefault(b["operator"], {}).setdefault(b["role"], []).append(b)
    return {op: {role: {"n": len(bs), "parent_rate": mean(b["parent_rate"] for b in bs),
                        "child_rate": mean(b["child_rate"] for b in bs),
                        "difference": mean(b["difference"] for b in bs),
                        "relative_change": mean(b["relative_change"] for b in bs)}
                 for role, bs in roles.items()}
            for op, roles in out.items()}


def child_epsilon(store_root: str | None, child: str) -> float | None:
    """The mutation scale ε a child was bred with, from its first version's metadata (services/evolver: the key
    `epsilon`); None without a store or for a child bred without one (crossovers)."""
    if not store_root:
        return None
    from populora.store import ArtifactStore, StoreError

    try:
        store = ArtifactStore(store_root)
        return store.read(store.ref(child, 1)).meta.get("epsilon")
    except (OSError, ValueError, StoreError):
        return None


def evolution_table(rows: list[dict], cfg) -> str:
    """Each child with its operator, ε, relative change of its weight update from its nearest parent, and its rate on
    its first step against its parent's on the birth step (birth_rates; spec 9: a child should start close to what its
    parents know)."""
    store_root = cfg.store_root if cfg is not None else None
    events = [(r["step"], e) for r in rows for e in r.get("evolution", [])]
    if not events:
        return "<p>No evolution events.</p>"
    ranked = any(e.get("rank") for _, e in events)  # a run of several ranks records them (spec 9, "Mixed ranks")
    head = ("<tr><th>step</th><th>child</th><th>replaces</th><th>parents</th><th>operator</th>"
            + ("<th>LoRA rank (parents → child)</th>" if ranked else "") + "<th>epsilon</th>"
            "<th>relative change from parent</th><th>effective rank</th><th>parent's rate (birth step)</th>"
            "<th>child's rate (next step)</th></tr>")
    body = []
    for (step, e), born in zip(events, birth_rates(rows)):
        eps = child_epsilon(store_root, e["child"])
        rates = ["-" if born[k] is None else f"{born[k]:.2f}" for k in ("parent_rate", "child_rate")]
        ranks = [f"{', '.join(map(str, e.get('parent_ranks', [])))} → {e.get('rank', '-')}"] if ranked else []
        cells = [str(step), e["child"], e["retired"], ", ".join(e["parents"]), e["operator"], *ranks,
                 "-" if eps is None else f"{eps:.3g}", f"{e['relative_change']:.3f}", f"{e['effective_rank']:.1f}",
                 *rates]
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return f"<table>{head}{''.join(body)}</table>"


def main(argv: list[str] | None = None) -> int:
    """`python -m coordinator.record.births RUN_DIR [RUN_DIR ...]`: every child of the runs with its two rates,
    and their summary per operator and role, as JSON (how docs/evolver.md's measurement of children's start was
    made)."""
    import argparse
    import json
    import sys
    from pathlib import Path

    from coordinator.record.stepmetrics import read_metrics

    p = argparse.ArgumentParser(prog="python -m coordinator.record.births", description=main.__doc__)
    p.add_argument("runs", nargs="+", type=Path, help="run directories (holding metrics.jsonl)")
    args = p.parse_args(argv)
    births = []
    for run in args.runs:
        rows = read_metrics(run)
        if not rows:
            print(f"error: {run}: no metrics.jsonl rows", file=sys.stderr)
            return 2
        births += [{"run": run.name, **b} for b in birth_rates(rows)]
    print(json.dumps({"births": births, "summary": summarise(births)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

