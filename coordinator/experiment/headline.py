"""The comparison's headline at one checkpoint, with intervals that respect how the data was made (spec 14, revised):
the difference population mean minus baseline with its hierarchical bootstrap interval (seeds, then problem families
within a seed), the t interval over seeds beside it with each seed's value, the old interval over (seed, problem)
pairs for reference, and for the generated benchmark a table per family (template x task type), the families left
out because their template shares behaviour with the warm start or the seed (populora.evals.overlap), and the
difference again without each family (leave one family out).

Pure functions over per-problem pass values; coordinator/experiment/checkpointeval.py gathers them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import mean

from populora.analysis.hierarchical import FEW_SEEDS, hierarchical_bootstrap, leave_one_out, seed_t_interval
from populora.analysis.intervals import paired_bootstrap
from populora.analysis.power import variance_components

HELDOUT = "heldout"  # the project's generated benchmark (populora.evals), always scored by an experiment
# A benchmark's likelihood score (populora.evals.likelihood) is reported as a benchmark of its own, `<name>-logprob`:
# its per-problem value is the mean log-probability per token of the problem's reference answer, not a pass value.
LOGPROB = "-logprob"


def measured(benchmark: str) -> str:
    """The benchmark a reported name scores: `cruxeval-o-logprob` -> `cruxeval-o`; a pass@1 name is itself."""
    return benchmark[: -len(LOGPROB)] if benchmark.endswith(LOGPROB) else benchmark


def is_likelihood(benchmark: str) -> bool:
    return benchmark.endswith(LOGPROB)
Members = Mapping[int, Mapping[str, Sequence[float]]]  # {seed: {problem: each member's pass value}}
Values = Mapping[int, Mapping[str, float]]  # {seed: {problem: the baseline's pass value}}


def template_of(problem_id: str) -> str:
    """A `heldout` problem's template (its id is heldout/<k>/<task type>/<template>)."""
    return problem_id.split("/")[3]


def family_of(benchmark: str, problem_id: str) -> str:
    """The family a problem belongs to: template x task type for the generated benchmark (one template's problems
    move together when a member learns it), the problem itself for a published one."""
    if measured(benchmark) == HELDOUT:
        _, _, task_type, template = problem_id.split("/")[:4]
        return f"{template} x {task_type}"
    return problem_id


def kept(problems: Sequence[str], benchmark: str, removed: Mapping[str, Sequence[str]] | None) -> list[str]:
    """The problems left after the families of the removed templates (generated benchmark only), in order."""
    if measured(benchmark) != HELDOUT or not removed:
        return list(problems)
    return [p for p in problems if template_of(p) not in removed]


def family_table(benchmark: str, pop: Members, base: Values, warm: Mapping[str, float] | None,
                 removed: Mapping[str, Sequence[str]]) -> list[dict]:
    """One row per family of the generated benchmark: its problems per seed, the population mean, the baseline, the
    warm start (when scored) and the difference, each a mean over seeds and problems; removed families included,
    marked with what their template shares behaviour with."""
    if measured(benchmark) != HELDOUT:
        return []
    families: dict[str, list[tuple[int, str]]] = {}
    for s, problems in pop.items():
        for p in problems:
            families.setdefault(family_of(benchmark, p), []).append((s, p))
    rows = []
    for f, where in sorted(families.items()):
        popv = [mean(pop[s][p]) for s, p in where]
        basev = [base[s][p] for s, p in where]
        warmv = [warm[p] for _, p in where if warm and p in warm]
        template = f.split(" x ")[0]
        rows.append({"family": f, "problems": len(where) // max(1, len(pop)), "population": mean(popv),
                     "baseline": mean(basev), "warm_start": mean(warmv) if warmv else None,
                     "difference": mean(popv) - mean(basev), "removed": list(removed.get(template, []))})
    return rows


def headline(benchmark: str, pop: Members, base: Values, warm: Mapping[str, float] | None = None,
             removed: Mapping[str, Sequence[str]] | None = None, *, n_resamples: int = 10_000) -> dict:
    """The numbers of the module docstring for one benchmark at one checkpoint. `pop` and `base` hold the scoring
    problems of every seed (the same problems per seed), `warm` the warm start's values, `removed` the held-out
    templates to leave out ({template: what it shares behaviour with})."""
    removed = dict(removed or {})
    seeds = sorted(pop)
    keep = {s: kept(list(pop[s]), benchmark, removed) for s in seeds}
    if not all(keep.values()):
        raise ValueError(f"{benchmark}: no problems are left after removing the families of {sorted(removed)}")
    diffs = {s: {} for s in seeds}
    for s in seeds:
        for p in keep[s]:
            diffs[s].setdefault(family_of(benchmark, p), []).append(mean(pop[s][p]) - base[s][p])
    h = hierarchical_bootstrap(diffs, n_resamples=n_resamples)
    t = seed_t_interval(h.per_seed)
    flat = paired_bootstrap({s: {p: pop[s][p] for p in keep[s]} for s in seeds},
                            {s: {p: base[s][p] for p in keep[s]} for s in seeds}, n_resamples=n_resamples)
    per_seed = {s: {"population": mean(mean(pop[s][p]) for p in keep[s]),
                    "baseline": mean(base[s][p] for p in keep[s]), "difference": h.per_seed[s],
                    "problems": len(keep[s])} for s in seeds}
    out = {"difference": h.difference, "low": h.low, "high": h.high, "confidence": h.confidence,
           "interval": "hierarchical bootstrap: seeds, then problem families within a seed",
           "n_families": h.n_families, "n_pairs": h.n_problems, "per_seed": per_seed,
           "seed_t": {"mean": t.mean, "low": t.low, "high": t.high, "sd": t.sd, "n_seeds": t.n_seeds},
           "few_seeds": len(seeds) < FEW_SEEDS,
           "pairs_interval": {"low": flat.low, "high": flat.high},
           # solved or not: a likelihood is no pass value, so its problems are not counted so
           "counts": None if is_likelihood(benchmark) else {
               "both": flat.counts.both, "only_population": flat.counts.only_population,
               "only_baseline": flat.counts.only_baseline, "neither": flat.counts.neither},
           "population_mean": mean(v["population"] for v in per_seed.values()),
           "baseline": mean(v["baseline"] for v in per_seed.values())}
    if len(seeds) > 1 and all(len(keep[s]) > 1 for s in seeds):  # the spread a design's power is computed from
        v = variance_components({s: [d for fam in diffs[s].values() for d in fam] for s in seeds})
        out["variance"] = {"sd_seed": v.sd_seed, "sd_problem": v.sd_problem, "sd_seed_means": v.sd_seed_means}
    if measured(benchmark) == HELDOUT:
        out["removed"] = sorted({family_of(benchmark, p) for s in seeds for p in pop[s]
                                 if template_of(p) in removed})
        out["removed_because"] = {k: list(v) for k, v in removed.items()}
        out["families"] = family_table(benchmark, pop, base, warm, removed)
        loo = leave_one_out(diffs)
        out["leave_one_out"] = dict(sorted(loo.items(), key=lambda kv: kv[1]))
    return out


def _f(v, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def headline_html(section: Mapping[str, Sequence[dict]]) -> str:
    """Under the checkpoint table, per benchmark at its last checkpoint: each seed's values, the t interval over
    seeds and the old interval over (seed, problem) pairs beside the hierarchical one; for the generated benchmark
    the families removed (and why), the table per family and the difference without each family."""
    import html

    parts = []
    for b, cps in section.items():
        c = next((c for c in reversed(cps) if "per_seed" in c), None)
        if c is None:
            continue
        seeds = "".join(f"<tr><td>{s}</td><td>{v['problems']}</td><td>{_f(v['population'])}</td>"
                        f"<td>{_f(v['baseline'])}</td><td>{_f(v['difference'])}</td></tr>"
                        for s, v in c["per_seed"].items())
        t = c["seed_t"]
        parts.append(
            f"<h3>{html.escape(b)} at {c['fraction']:.0%} of the budget</h3><p>Difference {_f(c['difference'])}, "
            f"95% hierarchical bootstrap [{_f(c['low'])}, {_f(c['high'])}] (seeds, then problem families); t interval "
            f"over the {t['n_seeds']} seeds [{_f(t['low'])}, {_f(t['high'])}]; the interval over (seed, problem) "
            f"pairs as if independent [{_f(c['pairs_interval']['low'])}, {_f(c['pairs_interval']['high'])}]."
            f"{' With fewer than five seeds, read the per-seed values:' if c.get('few_seeds') else ''}</p>"
            f"<table><tr><th>seed</th><th>problems</th><th>population mean</th><th>baseline</th>"
            f"<th>difference</th></tr>{seeds}</table>")
        if c.get("families"):
            removed = ", ".join(f"{html.escape(k)} (same outputs as {html.escape(', '.join(v))})"
                                for k, v in c["removed_because"].items()) or "none"
            rows = "".join(f"<tr><td>{html.escape(r['family'])}</td><td>{r['problems']}</td>"
                           f"<td>{_f(r['population'])}</td><td>{_f(r['baseline'])}</td><td>{_f(r['warm_start'])}</td>"
                           f"<td>{_f(r['difference'])}</td><td>{'removed' if r['removed'] else ''}</td></tr>"
                           for r in c["families"])
            loo = c.get("leave_one_out") or {}
            worst = min(loo.items(), key=lambda kv: kv[1], default=None)
            parts.append(
                f"<p>Templates left out (they share behaviour with a warm-start template or the seed): {removed}.</p>"
                "<table><tr><th>family</th><th>problems per seed</th><th>population</th><th>baseline</th>"
                f"<th>warm start</th><th>difference</th><th></th></tr>{rows}</table>"
                + (f"<p>Leave one family out: the difference moves to {_f(min(loo.values()))}-{_f(max(loo.values()))}; "
                   f"without {html.escape(worst[0])} it is {_f(worst[1])}.</p>" if worst else ""))
    return "".join(parts)
