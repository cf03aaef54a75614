"""The comparison's equal-compute and dynamics sections (spec 11, 14): the arms at each compute checkpoint with the
paired interval, and each arm's dynamics against compute with the complexity trend, as numbers (scores.json) and
as the report's tables and figures."""

from __future__ import annotations

import html
import json
from pathlib import Path

from coordinator.experiment.armdynamics import arm_dynamics, complexity_values
from coordinator.experiment.checkpointeval import compare_at_checkpoints
from coordinator.experiment.evalfiles import removed_templates, write_json
from coordinator.experiment.headline import headline_html, is_likelihood
from coordinator.record.figures import plt, save_figure
from populora.analysis.dynamics import COMPLEXITY_METRICS
from populora.analysis.intervals import trend

ARM_COLORS = {"population": "#1f77b4", "mixed-rank": "#9467bd", "baseline": "#d62728"}
TREND_KEYS = COMPLEXITY_METRICS


def checkpoint_section(exp, metrics: dict[str, list[dict]], evals: dict[str, dict[str, dict]],
                       arms: tuple[str, str] = ("population", "baseline")) -> dict:
    """{benchmark: [per checkpoint numbers]} (checkpointeval.compare_at_checkpoints) of the two `arms` over the seeds
    whose two arms both have metrics and, for that benchmark, an evaluation made at a compute budget."""
    rows = {(a.name, a.seed): metrics.get(a.run_id, []) for a in exp.arms}
    seeds = [s for s in exp.seeds if rows.get((arms[0], s)) and rows.get((arms[1], s))]
    out = {}
    for b in exp.benchmarks:
        files = {(a.name, a.seed): evals[a.run_id][b] for a in exp.arms
                 if a.name in arms and b in evals.get(a.run_id, {}) and evals[a.run_id][b].get("budget")}
        budgets = {f["budget"] for f in files.values()}
        if not seeds or len(budgets) != 1:
            continue
        out[b] = compare_at_checkpoints(seeds, rows, files, budgets.pop(), fractions=exp.cfg.eval.checkpoints,
                                        members=exp.cfg.eval.members, arms=arms, benchmark=b,
                                        removed=removed_templates(exp.out_dir))
    return out


def _cached_dynamics(exp, arm, rows: list[dict]) -> dict:
    """An arm run's dynamics, kept in dynamics/<run>.json and recomputed only when the run has more steps."""
    path = exp.out_dir / "dynamics" / f"{arm.run_id}.json"
    last = rows[-1]["step"] if rows else -1
    if path.exists():
        done = json.loads(path.read_text())
        if done.get("last_step") == last:
            return done
    dyn = arm_dynamics(rows, exp.cfg.store_root, weights=arm.name != "baseline", run_id=arm.run_id)
    dyn["last_step"] = last
    write_json(path, dyn)
    return dyn


def _trend(series: dict) -> dict | None:
    try:
        t = trend(series)
    except ValueError:  # fewer than two steps with valid programs
        return None
    return {"slope": t.slope, "low": t.low, "high": t.high, "n_steps": t.n_steps, "n_seeds": t.n_seeds,
            "resampled": t.resampled, "per": "FLOP", "per_seed": {str(s): v for s, v in t.per_seed.items()},
            "seed_mean": t.seed_mean}


def dynamics_section(exp, metrics: dict[str, list[dict]], given: dict[str, dict] | None = None) -> dict:
    """Per arm run its dynamics (`given`, when computed before: a result made of shards; else computed and kept
    under the experiment's directory); per arm the complexity trends over its seeds (slope per FLOP with a 95%
    bootstrap interval) and the students' mean oscillation."""
    runs = {a.run_id: given[a.run_id] if given is not None and a.run_id in given else
            _cached_dynamics(exp, a, metrics[a.run_id]) for a in exp.arms if metrics.get(a.run_id)}
    arms = {}
    for name in ("population", "mixed-rank", "baseline"):
        mine = [a for a in exp.arms if a.name == name and a.run_id in runs]
        if not mine:
            continue
        osc = [v for a in mine for v in runs[a.run_id]["oscillation"].values() if v is not None]
        arms[name] = {"trend": {k: _trend({a.seed: complexity_values(metrics[a.run_id], k) for a in mine})
                                for k in TREND_KEYS},
                      "oscillation_mean": sum(osc) / len(osc) if osc else None,
                      "distinct_shapes": [runs[a.run_id]["coverage"][-1]["distinct_shapes"]
                                          for a in mine if runs[a.run_id]["coverage"]]}
    return {"runs": runs, "arms": arms}


# ---------------------------------------------------------------- figures

def _seed_styles(exp) -> dict[int, str]:
    return {s: ("-", "--", ":", "-.")[i % 4] for i, s in enumerate(sorted({a.seed for a in exp.arms}))}


def plot_dynamics(exp, dyn: dict, path: Path) -> None:
    """Complexity, coverage, behavioural and weight diversity, each against the compute charged to the budget."""
    panels = (("mean AST depth of valid proposals", lambda d: (d["flops"], d["complexity"]["ast_depth"])),
              ("distinct program shapes (cumulative)", lambda d: (d["flops"], [c["distinct_shapes"]
                                                                               for c in d["coverage"]])),
              ("AST node types used (cumulative)", lambda d: (d["flops"], [c["node_types"] for c in d["coverage"]])),
              ("new-shape rate", lambda d: (d["flops"], [c["new_shape_rate"] for c in d["coverage"]])),
              ("behavioural diversity (a baseline: its proposals split in two)",
               lambda d: (d["flops"], d.get("behavioural_reference") or d["behavioural_diversity"])),
              ("members' weight distance (relative)", lambda d: ([w["flops"] for w in d["weight_diversity"]],
                                                                 [w["distance"] for w in d["weight_diversity"]])))
    fig, axes = plt.subplots(2, 3, figsize=(13, 6))
    styles = _seed_styles(exp)
    for ax, (title, xy) in zip(axes.flat, panels):
        for arm in exp.arms:
            d = dyn["runs"].get(arm.run_id)
            if not d:
                continue
            xs, ys = xy(d)
            pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=ARM_COLORS[arm.name], ls=styles[arm.seed],
                        marker="o", ms=3, label=f"{arm.name} s{arm.seed}")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("FLOPs charged to the budget")
        if ax.lines:
            ax.legend(fontsize=6)
    save_figure(fig, path, 72)


def plot_checkpoints(exp, section: dict, path: Path) -> bool:
    """Per benchmark: population mean, baseline and the difference with its interval at each checkpoint."""
    if not section:
        return False
    fig, axes = plt.subplots(1, len(section), figsize=(5 * len(section), 3.6), squeeze=False)
    for ax, (b, cps) in zip(axes[0], section.items()):
        done = [c for c in cps if "difference" in c]
        xs = [c["flops"] for c in done]
        ax.plot(xs, [c["population_mean"] for c in done], "D-", color=ARM_COLORS["population"], label="population mean")
        ax.plot(xs, [c["baseline"] for c in done], "o-", color=ARM_COLORS["baseline"], label="baseline")
        ax.errorbar(xs, [c["difference"] for c in done], yerr=[[c["difference"] - c["low"] for c in done],
                                                                [c["high"] - c["difference"] for c in done]],
                    fmt="s", color="black", capsize=3, label="difference, 95% interval")
        ax.axhline(0, color="grey", lw=0.8)
        what = "log-prob per token of the reference answer" if is_likelihood(b) else "pass@1"
        ax.set_title(f"{b}: {what} at equal compute (scoring split)", fontsize=9)
        ax.set_xlabel("FLOPs charged to the budget")
        ax.legend(fontsize=7)
    save_figure(fig, path, 72)
    return True


# ---------------------------------------------------------------- tables

def _f(v, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def checkpoint_table(exp, section: dict, arms: tuple[str, str] = ("population", "baseline")) -> str:
    """The checkpoints of `section` as a table; `arms` the two it compares (the second's value on a problem is its
    scored members' mean when it is a population)."""
    first, second = arms
    short = {"population": "pop", "mixed-rank": "mixed", "baseline": "base"}
    a1, a2 = short.get(first, first), short.get(second, second)
    head = ["benchmark", "checkpoint", "FLOPs", f"steps {a1} / {a2} (per seed)", f"gap {a1} / {a2} (FLOPs)",
            f"{first} mean", "worst member", "best member", second if second == "baseline" else f"{second} mean",
            "difference [95% interval]", "pairs", f"both / only {a1} / only {a2} / neither"]
    rows = []
    for b, cps in section.items():
        for c in cps:
            arms_at = c["arms"]
            steps = "; ".join(f"s{s}: {a[first]['step']} / {a[second]['step']}" for s, a in arms_at.items())
            gaps = "; ".join(f"s{s}: {_e(a[first]['gap'])} / {_e(a[second]['gap'])}" for s, a in arms_at.items())
            k = c.get("counts") or {}
            cells = [b, f"{c['fraction']:.0%}", _e(c["flops"]), steps, gaps, _f(c.get("population_mean")),
                     _f(c.get("worst_member")), _f(c.get("best_member")), _f(c.get("baseline")),
                     f"{_f(c.get('difference'))} [{_f(c.get('low'))}, {_f(c.get('high'))}]", str(c.get("n_pairs", "-")),
                     " / ".join(str(k.get(x, "-")) for x in ("both", "only_population", "only_baseline", "neither"))]
            rows.append("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in cells) + "</tr>")
    return ("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" + "".join(rows)
            + "</table>" + headline_html(section))


MIXED_VS_UNIFORM = ("mixed-rank", "population")


def mixed_rank_section(exp, scores: dict) -> str:
    """The report's section of the mixed-rank population against the uniform one at each checkpoint (spec 9, "Mixed
    ranks"), from scores["checkpoints_mixed_rank"]."""
    teachers, students = exp.cfg.lora.mixed_ranks()
    return (f"<h2>Mixed ranks against one rank, at equal compute</h2><p>The mixed-rank population (teachers at ranks "
            f"{', '.join(map(str, teachers))}, students at {', '.join(map(str, students))}) against the population "
            f"of every member at rank {exp.cfg.lora.rank}, the same statistics as above: the difference is the "
            "mixed-rank mean minus the uniform population's mean, with a 95% paired bootstrap interval over (seed, "
            "problem); the counts pair every mixed-rank member with the uniform population's mean on each problem "
            "(solved at 0.5).</p>" + checkpoint_table(exp, scores["checkpoints_mixed_rank"], MIXED_VS_UNIFORM))


def _e(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def _trend_cell(t: dict | None) -> str:
    """The slope, its interval and the method behind it (a t interval over seeds below five seeds, with each
    seed's slope beside it: populora.analysis.intervals.trend)."""
    if t is None:
        return "-"
    cell = f"{t['slope'] * 1e15:.3g} [{t['low'] * 1e15:.3g}, {t['high'] * 1e15:.3g}] ({t['resampled']})"
    if t.get("per_seed") and t["n_seeds"] > 1:
        cell += "; " + ", ".join(f"s{s}: {v * 1e15:.3g}" for s, v in t["per_seed"].items())
    return cell


def trend_table(dyn: dict) -> str:
    head = ["arm"] + [f"{k} slope per 1e15 FLOPs [95%] (per seed)" for k in TREND_KEYS] + [
        "mean oscillation", "distinct shapes (per seed)"]
    rows = []
    for name, a in dyn["arms"].items():
        cells = [name]
        for k in TREND_KEYS:
            cells.append(_trend_cell(a["trend"][k]))
        cells += [_f(a["oscillation_mean"], 2), ", ".join(map(str, a["distinct_shapes"]))]
        rows.append("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in cells) + "</tr>")
    return ("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" + "".join(rows)
            + "</table>")
