"""The labelled lines `python -m coordinator.experiment.reanalyse` prints: each number a result's text uses, named as
the text names it, with what a fixed analysis changed beside it ("before: ...")."""

from __future__ import annotations

from collections.abc import Iterator


def _f(v, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _interval(lo, hi) -> str:
    return f"[{_f(lo)}, {_f(hi)}]"


def _seeds(d: dict, key: str, digits: int = 3) -> str:
    return ", ".join(f"s{s}: {_f(v[key], digits) if isinstance(v[key], float) else v[key]}" for s, v in d.items())


def checkpoint_lines(b: str, c: dict) -> Iterator[str]:
    yield f"{b} at {c['fraction']:.0%} of the budget ({c['flops']:.3g} FLOPs)"
    for s, arms in c["arms"].items():
        yield "  seed " + str(s) + ": " + "; ".join(
            f"{a} step {v['step']}, {v['flops']:.3g} FLOPs (gap {v['gap']:.2g})" for a, v in arms.items()
            if v["step"] is not None)
    yield (f"  population mean {_f(c['population_mean'])}, baseline {_f(c['baseline'])}, worst / best member "
           f"{_f(c['worst_member'])} / {_f(c['best_member'])}, (seed, problem) pairs {c['n_pairs']}, families "
           f"{c['n_families']}")
    yield (f"  difference {_f(c['difference'])}, 95% hierarchical bootstrap {_interval(c['low'], c['high'])}; "
           f"t interval over seeds {_interval(c['seed_t']['low'], c['seed_t']['high'])}; pairs as independent "
           f"{_interval(c['pairs_interval']['low'], c['pairs_interval']['high'])}")
    yield "  per seed (population / baseline / difference): " + "; ".join(
        f"s{s}: {_f(v['population'])} / {_f(v['baseline'])} / {_f(v['difference'])} on {v['problems']}"
        for s, v in c["per_seed"].items())
    k = c["counts"]
    yield (f"  paired counts (both / only population / only baseline / neither): {k['both']} / "
           f"{k['only_population']} / {k['only_baseline']} / {k['neither']}")
    if c.get("removed") is not None:
        why = "; ".join(f"{t}: same outputs as {', '.join(v)}" for t, v in (c.get("removed_because") or {}).items())
        yield f"  families removed: {', '.join(c['removed']) or 'none'} ({why or 'no template shares behaviour'})"
    e = c["every_family"]
    yield (f"  with every family kept (as before): population {_f(e['population_mean'])}, baseline "
           f"{_f(e['baseline'])}, difference {_f(e['difference'])} {_interval(e['low'], e['high'])}, pairs as "
           f"independent {_interval(e['pairs_interval']['low'], e['pairs_interval']['high'])}, t over seeds "
           f"{_interval(e['seed_t']['low'], e['seed_t']['high'])}; per seed "
           + ", ".join(f"s{s}: {_f(v['difference'])}" for s, v in e["per_seed"].items()))
    for label, part in (("kept", c), ("every family", e)):
        loo = part.get("leave_one_out") or {}
        if loo:
            low = min(loo, key=loo.get)
            yield (f"  leave one family out ({label}): {_f(min(loo.values()))} to {_f(max(loo.values()))}; "
                   f"without {low}: {_f(loo[low])}")
    for r in e.get("families") or []:
        yield (f"  family {r['family']}: {r['problems']} problems a seed, population {_f(r['population'])}, baseline "
               f"{_f(r['baseline'])}, warm start {_f(r['warm_start'])}, difference {_f(r['difference'])}"
               + (f", removed (same outputs as {', '.join(r['removed'])})" if r["removed"] else ""))


def lines(n: dict) -> Iterator[str]:
    yield f"experiment {n['experiment_id']}, seeds {n['seeds']}, budget {n['budget_flops']:.3g} FLOPs"
    if n["overlap"] is not None:
        shared = {k: v for k, v in n["overlap"]["shared"].items() if v}
        yield f"held-out templates sharing behaviour with the warm start or the seed: {shared or 'none'}"
    for b, cps in n["checkpoints"].items():
        for c in cps:
            yield from checkpoint_lines(b, c)
    for a in n["arms"].values():
        for b, e in a["evals"].items():
            yield (f"{a['arm']} s{a['seed']} ({a['steps']} steps, {a['budget_flops']:.3g} FLOPs) on all {e['n_problems']} "
                   f"{b} problems: members {e['members']}, mean {_f(e['mean'])}, students {_f(e['students_mean'])} "
                   f"(before the role fix: {_f(e['students_mean_before'])}), scored in {e['seconds']} s"
                   + (f"; warm start {_f(e['warm_start'])}" if e["warm_start"] is not None else ""))
    for arm, d in n["dynamics"].items():
        p = d["per_seed"]
        yield f"{arm}: steps per seed (seed order) {_seeds(p, 'steps')}"
        for k, t in d["trend"].items():
            yield (f"{arm}: {k} slope per 1e15 FLOPs {t['slope_per_1e15']} [{t['low']}, {t['high']}] ({t['interval']}); "
                   f"per seed {t['per_seed']}")
        yield f"{arm}: AST depth first half -> second half per seed " + "; ".join(
            f"s{s}: {_f(v['ast_depth_halves']['first_half']['mean'], 2)} -> "
            f"{_f(v['ast_depth_halves']['second_half']['mean'], 2)}" for s, v in p.items())
        yield f"{arm}: distinct shapes {_seeds(p, 'distinct_shapes')}; node types {_seeds(p, 'node_types')}"
        yield f"{arm}: oscillation mean {_f(d['oscillation_mean'], 2)}"
        yield (f"{arm}: behavioural diversity, mean over steps, active teachers {_seeds(p, 'behavioural_diversity')}"
               f" (before: {_seeds(p, 'behavioural_diversity_before')}); one-policy reference "
               f"{_seeds(p, 'behavioural_reference')}")
        yield f"{arm}: weight diversity at the last step (cosine / distance, whole updates) " + "; ".join(
            f"s{s}: {_f((v['weight_diversity_last'] or {}).get('cosine'), 2)} / "
            f"{_f((v['weight_diversity_last'] or {}).get('distance'), 2)}" for s, v in p.items())
    b = n["births"]
    yield f"children {b['children']}, {b['with_next_step']} with a next step; operators {b['operators']}"
    for op, roles in b["summary"].items():
        for role, s in roles.items():
            yield (f"  {op} {role}: n {s['n']}, parent rate {_f(s['parent_rate'], 2)}, child rate "
                   f"{_f(s['child_rate'], 2)}, relative change {_f(s['relative_change'], 2)}")
    yield f"cost: wall {n['cost']['wall']}, CPU {n['cost']['cpu']}, peak resident {n['cost']['max_rss_kb']} kB"
