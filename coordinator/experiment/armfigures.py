"""The comparison's figures of the arms' training and held-out scores, against compute (tokens spent) and steps:
solve and valid rates, the complexity of valid programs with its spread, the members' ratings, the compute itself and
held-out pass@1 (coordinator/experiment/comparison.py writes them beside its report)."""

from __future__ import annotations

from pathlib import Path

from coordinator.experiment.headline import is_likelihood
from coordinator.record.figures import plt, save_figure
from coordinator.record.stepmetrics import COMPLEXITY_KEYS

ARM_COLORS = {"population": "#1f77b4", "mixed-rank": "#9467bd", "baseline": "#d62728"}
SEED_STYLES = ("-", "--", ":", "-.")
COMPLEXITY_TITLES = {"ast_depth": "AST depth", "cyclomatic": "McCabe complexity", "lines_of_code": "lines of code"}
DPI = 72


def _ktokens(row: dict) -> float:
    return row.get("compute_cumulative", {}).get("tokens", 0) / 1e3


def _lines(ax, exp, metrics, y, x: str = "tokens", band=None) -> None:
    """One line per arm run: colour by arm, line style by seed; `band(row)` -> (lo, hi) shades a spread."""
    seeds = sorted({a.seed for a in exp.arms})
    for arm in exp.arms:
        rows = [r for r in metrics.get(arm.run_id, []) if r["step"] > 0 and y(r) is not None]
        if not rows:
            continue
        xs = [_ktokens(r) if x == "tokens" else r["step"] for r in rows]
        color, ls = ARM_COLORS[arm.name], SEED_STYLES[seeds.index(arm.seed) % len(SEED_STYLES)]
        ax.plot(xs, [y(r) for r in rows], color=color, ls=ls, marker="o", ms=3,
                label=f"{arm.name} s{arm.seed}")
        if band is not None:
            lo_hi = [band(r) for r in rows]
            ax.fill_between(xs, [b[0] for b in lo_hi], [b[1] for b in lo_hi], color=color, alpha=0.12)
    ax.set_xlabel("thousand tokens spent" if x == "tokens" else "step")
    if x == "tokens" and exp.cfg.run.budget_tokens:  # the budget every arm stops at (its first boundary past it)
        ax.axvline(exp.cfg.run.budget_tokens / 1e3, color="grey", ls=":", lw=1)


def plot_rates(exp, metrics, path: Path) -> None:
    fig, axes = plt.subplots(2, 2, figsize=(10, 6))
    for i, (key, title) in enumerate((("solve_rate", "solve rate (mean rho over valid tasks)"),
                                      ("valid_rate", "valid-proposal rate"))):
        for j, x in enumerate(("tokens", "step")):
            ax = axes[i][j]
            _lines(ax, exp, metrics, lambda r, k=key: r.get(k), x)
            ax.set_title(f"{title} vs {'compute' if x == 'tokens' else 'step'}", fontsize=9)
            ax.set_ylim(-0.05, 1.05)
            ax.legend(fontsize=7)
    save_figure(fig, path, DPI)


def plot_complexity(exp, metrics, path: Path) -> None:
    fig, axes = plt.subplots(2, 3, figsize=(13, 6))
    for j, key in enumerate(COMPLEXITY_KEYS):
        def y(r, k=key):
            return r.get("complexity", {}).get(k, {}).get("mean")

        def band(r, k=key):
            c = r["complexity"][k]
            return c["mean"] - c["std"], c["mean"] + c["std"]

        for i, x in enumerate(("tokens", "step")):
            _lines(axes[i][j], exp, metrics, y, x, band)
            axes[i][j].set_title(f"{COMPLEXITY_TITLES[key]} of valid programs, mean +- std", fontsize=9)
            axes[i][j].legend(fontsize=7)
    save_figure(fig, path, DPI)


def plot_ratings(exp, metrics, path: Path) -> None:
    """Conservative skill of every member (teachers solid, students dashed, the baseline's one adapter red)."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    for arm in exp.arms:
        traj: dict[str, list[tuple[float, int, float, str]]] = {}
        for r in metrics.get(arm.run_id, []):
            for adapter, rating in r.get("ratings", {}).items():
                traj.setdefault(adapter, []).append((_ktokens(r), r["step"], rating["skill"], rating.get("role", "")))
        for adapter, pts in sorted(traj.items()):
            role = pts[-1][3]
            color = ARM_COLORS[arm.name] if arm.name == "baseline" else ("#1f77b4" if role == "teacher" else "#2ca02c")
            for ax, idx in ((axes[0], 0), (axes[1], 1)):
                ax.plot([p[idx] for p in pts], [p[2] for p in pts], color=color, marker=".", lw=1,
                        ls="--" if role == "student" else "-", alpha=0.8,
                        label=f"{adapter.rsplit('.', 1)[-1]} s{arm.seed} ({arm.name[:4]})")
    axes[0].set_xlabel("thousand tokens spent")
    axes[1].set_xlabel("step")
    for ax in axes:
        ax.set_title("conservative skill mu - 3 sigma (teachers blue, students green dashed, baseline red)",
                     fontsize=8)
        ax.legend(fontsize=6, ncol=3)
    save_figure(fig, path, DPI)


def plot_compute(exp, metrics, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    _lines(axes[0], exp, metrics, _ktokens, "step")
    axes[0].set_title("thousand tokens spent (generated + trained) by step", fontsize=9)
    seeds = sorted({a.seed for a in exp.arms})
    for arm in exp.arms:
        rows = metrics.get(arm.run_id, [])
        wall, acc = [], 0.0
        for r in rows:
            acc += r.get("step_seconds", 0)
            wall.append(acc / 60)
        axes[1].plot([_ktokens(r) for r in rows], wall, color=ARM_COLORS[arm.name], marker="o", ms=3,
                     ls=SEED_STYLES[seeds.index(arm.seed) % len(SEED_STYLES)], label=f"{arm.name} s{arm.seed}")
    axes[1].set_title("wall-clock minutes by compute", fontsize=9)
    axes[1].set_xlabel("thousand tokens spent")
    if exp.cfg.run.budget_tokens:
        axes[1].axvline(exp.cfg.run.budget_tokens / 1e3, color="grey", ls=":", lw=1)
    for ax in axes:
        ax.legend(fontsize=7)
    save_figure(fig, path, DPI)


def plot_evals(exp, scores: dict, path: Path) -> None:
    """Held-out pass@1 against the compute each arm spent: the warm start both began from (at step 0's compute),
    each population member (small dots), the population's mean and the baseline (large markers)."""
    benchmarks = [b for b in exp.benchmarks if any(b in n["evals"] for n in scores["arms"].values())
                  and not is_likelihood(b)]  # pass values on one scale; the likelihoods are in the tables
    if not benchmarks:
        return
    fig, axes = plt.subplots(1, len(benchmarks), figsize=(5 * len(benchmarks), 3.6), squeeze=False)
    for ax, b in zip(axes[0], benchmarks):
        for n in scores["arms"].values():
            e = n["evals"].get(b)
            if not e:
                continue
            color, x = ARM_COLORS[n["arm"]], n["tokens"] / 1e3
            if e["start"] is not None:
                ax.scatter([n["step0_tokens"] / 1e3], [e["start"]], color="grey", marker="s", s=30)
            ax.scatter([x] * len(e["members"]), [m["pass_at_1"] for m in e["members"].values()], color=color, s=10,
                       alpha=0.6)
            if e["mean"] is not None:
                ax.scatter([x], [e["mean"]], color=color, s=70, marker="D" if n["arm"] == "population" else "o",
                           label=f"{n['arm']} s{n['seed']} {'mean' if n['arm'] == 'population' else ''}")
        ax.set_title(f"{b}: pass@1 vs compute (grey: warm start)", fontsize=9)
        ax.set_xlabel("thousand tokens spent")
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=7)
    save_figure(fig, path, DPI)
