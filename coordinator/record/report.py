"""`populora report RUN`: an HTML page with PNG plots of a run, made from its metrics.jsonl (and the scores
`populora eval --run` appended to evals.jsonl beside it)."""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path

from coordinator.record.births import evolution_table
from coordinator.record.efficiency import efficiency_table
from coordinator.record.figures import plt, save_figure
from coordinator.record.stepmetrics import read_metrics
from populora import names

COLORS = {"code_i": "#1f77b4", "code_o": "#d62728", "code_f": "#2ca02c", "math_w": "#9467bd"}
DPI = 90


def _series(rows: list[dict], tt: str, key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in rows:
        v = r.get("task_types", {}).get(tt, {}).get(key)
        if v is not None:
            xs.append(r["step"])
            ys.append(v)
    return xs, ys


def _task_types(rows: list[dict]) -> list[str]:
    seen: list[str] = []
    for r in rows:
        for tt in r.get("task_types", {}):
            if tt not in seen:
                seen.append(tt)
    return seen


def _evolution_steps(rows: list[dict]) -> list[int]:
    return [r["step"] for r in rows if r.get("evolution")]


def plot_solve_rate(rows, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for tt in _task_types(rows):
        axes[0].plot(*_series(rows, tt, "solve_rate"), marker="o", label=tt, color=COLORS.get(tt))
        axes[1].plot(*_series(rows, tt, "valid_rate"), marker="s", label=tt, color=COLORS.get(tt))
    for ax, title in zip(axes, ("student solve rate (mean rho)", "valid-proposal rate")):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylim(-0.05, 1.05)
        for s in _evolution_steps(rows):
            ax.axvline(s, color="grey", ls=":", lw=1)
        ax.legend(fontsize=8)
    save_figure(fig, path, DPI)


def plot_complexity(rows, path: Path) -> None:
    keys = (("ast_depth", "AST depth"), ("cyclomatic", "cyclomatic complexity"), ("lines_of_code", "lines of code"))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for ax, (key, title) in zip(axes, keys):
        for tt in _task_types(rows):
            ax.plot(*_series(rows, tt, key), marker="o", label=tt, color=COLORS.get(tt))
        ax.set_title(f"{title} of valid programs")
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
    save_figure(fig, path, DPI)


def plot_ratings(rows, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(11, 4))
    traj: dict[str, tuple[list[int], list[float], str]] = {}
    for r in rows:
        for adapter, rating in r.get("ratings", {}).items():
            xs, ys, role = traj.setdefault(adapter, ([], [], rating.get("role", "")))
            xs.append(r["step"])
            ys.append(rating["skill"])
    for adapter, (xs, ys, role) in sorted(traj.items()):
        ax.plot(xs, ys, marker=".", ls="-" if role != "student" else "--", label=f"{adapter.split('.')[-1]} ({role})")
    for r in rows:
        for e in r.get("evolution", []):
            ax.axvline(r["step"], color="grey", ls=":", lw=1)
            ax.annotate(f"{e['operator']}", (r["step"], ax.get_ylim()[1]), fontsize=7, rotation=90, va="top")
    ax.set_title("conservative skill mu - 3 sigma (teachers solid, students dashed; dotted lines: evolution)")
    ax.set_xlabel("step")
    ax.legend(fontsize=7, ncol=4)
    save_figure(fig, path, DPI)


def _spent(r: dict) -> float:
    return r.get("compute_cumulative", {}).get("tokens", 0) / 1e3


def plot_compute(rows, path: Path) -> None:
    """Compute spent (spec 14) over the steps, and the solve and valid rates against it: the axis on which arms of
    different cost compare."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    steps = [r["step"] for r in rows]
    for key, label in (("generated_tokens", "generated"), ("trained_tokens", "trained")):
        axes[0].plot(steps, [r.get("compute_cumulative", {}).get(key, 0) / 1e3 for r in rows], marker="o",
                     label=label)
    axes[0].set_title("tokens spent (thousands, cumulative)")
    axes[0].set_xlabel("step")
    axes[0].legend(fontsize=8)
    for ax, key, title in ((axes[1], "solve_rate", "solve rate vs compute"),
                           (axes[2], "valid_rate", "valid-proposal rate vs compute")):
        plotted = False
        for tt in _task_types(rows):
            pts = [(_spent(r), r["task_types"][tt][key]) for r in rows
                   if r.get("task_types", {}).get(tt, {}).get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=tt, color=COLORS.get(tt))
                plotted = True
        ax.set_title(title)
        ax.set_xlabel("thousand tokens spent (generated + trained)")
        ax.set_ylim(-0.05, 1.05)
        if plotted:
            ax.legend(fontsize=8)
        else:  # a solve rate needs a valid task: say so rather than draw an empty frame
            ax.text(0.5, 0.5, "no valid task yet", ha="center", va="center", transform=ax.transAxes, color="0.4")
    save_figure(fig, path, DPI)


def lineage(rows: list[dict]) -> tuple[dict[str, dict], list[dict]]:
    """Nodes {adapter: {role, born, retired}} and edges [{parent, child, operator, step}] from the metrics."""
    nodes: dict[str, dict] = {}
    edges: list[dict] = []
    for r in rows:
        for adapter, m in (r.get("population") or {}).items():
            nodes.setdefault(adapter, {"role": m["role"], "born": 0, "retired": None})
        for e in r.get("evolution", []):
            nodes.setdefault(e["child"], {"role": e["role"], "born": r["step"], "retired": None})
            nodes[e["child"]]["born"] = r["step"]
            if e["retired"] in nodes:
                nodes[e["retired"]]["retired"] = r["step"]
            for p in e["parents"]:
                edges.append({"parent": p, "child": e["child"], "operator": e["operator"], "step": r["step"]})
    return nodes, edges


def plot_lineage(rows, path: Path) -> None:
    nodes, edges = lineage(rows)
    last = max((r["step"] for r in rows), default=0)
    fig, ax = plt.subplots(figsize=(11, max(2.5, 0.45 * len(nodes) + 1)))
    order = sorted(nodes, key=lambda a: (nodes[a]["role"], nodes[a]["born"], a))
    y = {a: i for i, a in enumerate(order)}
    for a in order:
        n = nodes[a]
        end = n["retired"] if n["retired"] is not None else last
        color = "#1f77b4" if n["role"] == "teacher" else "#d62728" if n["role"] == "student" else "#555"
        ax.plot([n["born"], end], [y[a], y[a]], color=color, lw=3, alpha=0.6 if n["retired"] is not None else 1)
        ax.text(n["born"], y[a] + 0.15, a.split(".")[-1] + (" (retired)" if n["retired"] is not None else ""),
                fontsize=7)
    for e in edges:
        if e["parent"] in y:
            ax.annotate("", xy=(e["step"], y[e["child"]]), xytext=(e["step"], y[e["parent"]]),
                        arrowprops={"arrowstyle": "->", "color": "grey"})
            ax.text(e["step"] + 0.05, (y[e["child"]] + y[e["parent"]]) / 2, e["operator"], fontsize=7)
    ax.set_yticks([])
    ax.set_xlabel("step")
    ax.set_title("lineage: lifetimes (blue teachers, red students) and parent -> child edges with operator")
    save_figure(fig, path, DPI)


def eval_points(rows: list[dict], run_dir: Path) -> list[dict]:
    """Every held-out score of the run: the eval phases' (metrics.jsonl) and `populora eval --run`'s (evals.jsonl),
    as {step, benchmark, label, adapter_id, pass_at_1, n_problems}; a later record of the same point wins."""
    points: dict[tuple, dict] = {}
    for r in rows:
        ev = r.get("eval")
        if not ev:
            continue
        for label, p1 in ev["pass_at_1"].items():
            points[(r["step"], ev["benchmark"], label)] = {
                "step": r["step"], "benchmark": ev["benchmark"], "label": label,
                "adapter_id": ev.get("adapters", {}).get(label), "pass_at_1": p1, "n_problems": ev.get("n_problems")}
    extra = run_dir / "evals.jsonl"
    if extra.exists():
        for line in extra.read_text().splitlines():
            try:
                e = json.loads(line)
                points[(int(e.get("step", 0)), e["benchmark"], e["label"])] = {
                    "step": int(e.get("step", 0)), "benchmark": e["benchmark"], "label": e["label"],
                    "adapter_id": e.get("adapter_id"), "pass_at_1": float(e["pass_at_1"]),
                    "n_problems": e.get("n_problems")}
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a crash: the others still count
    return sorted(points.values(), key=lambda p: (p["benchmark"], p["step"], p["adapter_id"] or "", p["label"]))


def plot_evals(points: list[dict], path: Path) -> bool:
    """pass@1 over the steps per benchmark: each adapter's versions (thin), the population's mean (bold), the bare
    base model (dashed). Drawn only when some benchmark has scores at two or more steps."""
    benchmarks = [b for b in dict.fromkeys(p["benchmark"] for p in points)
                  if len({p["step"] for p in points if p["benchmark"] == b}) > 1]
    if not benchmarks:
        return False
    fig, axes = plt.subplots(1, len(benchmarks), figsize=(5.5 * len(benchmarks), 3.6), squeeze=False)
    for ax, bench in zip(axes[0], benchmarks):
        mine = [p for p in points if p["benchmark"] == bench]
        for adapter in dict.fromkeys(p["adapter_id"] for p in mine if p["adapter_id"]):
            xs = [(p["step"], p["pass_at_1"]) for p in mine if p["adapter_id"] == adapter]
            ax.plot([x for x, _ in xs], [y for _, y in xs], lw=0.8, alpha=0.5, marker=".")
        steps = sorted({p["step"] for p in mine if p["adapter_id"]})
        means = [sum(q["pass_at_1"] for q in mine if q["adapter_id"] and q["step"] == s)
                 / max(1, sum(1 for q in mine if q["adapter_id"] and q["step"] == s)) for s in steps]
        ax.plot(steps, means, lw=2.2, color="black", marker="o", label="population mean")
        for p in (p for p in mine if not p["adapter_id"]):
            ax.axhline(p["pass_at_1"], color="grey", ls="--", lw=1.2, label=f"base (step {p['step']})")
        ax.set_title(f"{bench}: pass@1")
        ax.set_xlabel("step")
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=8)
    save_figure(fig, path, DPI)
    return True


def _eval_table(points: list[dict]) -> str:
    if not points:
        return "<p>No held-out evaluation yet (eval.every, or <code>populora eval --run</code>).</p>"
    head = "<tr><th>benchmark</th><th>step</th><th>model</th><th>problems</th><th>pass@1</th></tr>"
    body = "".join(f"<tr><td>{html.escape(p['benchmark'])}</td><td>{p['step']}</td><td>{html.escape(p['label'])}"
                   f"</td><td>{p['n_problems'] if p['n_problems'] is not None else '-'}</td>"
                   f"<td>{p['pass_at_1']:.3f}</td></tr>" for p in points)
    return f"<table>{head}{body}</table>"


def _warm(r: dict) -> str:
    w = r.get("warm_start")
    if not w:
        return ""
    loss = "" if w.get("loss_first") is None else f", loss {w['loss_first']:.2f} -> {w['loss_last']:.2f}"
    how = "from the cache" if w.get("cached") else f"fitted in {w.get('fit_seconds', 0):.0f} s"
    return html.escape(f"warm start on {w['examples']} examples ({how}{loss}); ")


def _tokens(r: dict) -> str:
    c = r.get("compute_cumulative")
    return "-" if c is None else f"{c['tokens']:,}"


def _table(rows: list[dict]) -> str:
    head = "<tr><th>step</th><th>seconds</th><th>tokens spent</th><th>valid</th>" + "".join(
        f"<th>{tt} solve</th>" for tt in _task_types(rows)) + "<th>events</th></tr>"
    body = []
    for r in rows:
        if r["step"] == 0:
            body.append(f"<tr><td>0</td><td>{r['step_seconds']:.1f}</td><td>{_tokens(r)}</td><td colspan=9>"
                        f"{_warm(r)}seeding: buffers "
                        f"{html.escape(json.dumps(r.get('seed_sizes')))}, rejections "
                        f"{html.escape(json.dumps(r.get('seed_reasons')))}</td></tr>")
            continue
        cells = [str(r["step"]), f"{r['step_seconds']:.1f}", _tokens(r),
                 "-" if r.get("valid_rate") is None else f"{r['valid_rate']:.2f}"]
        for tt in _task_types(rows):
            v = r["task_types"].get(tt, {}).get("solve_rate")
            cells.append("-" if v is None else f"{v:.2f}")
        ev = "; ".join(f"{e['retired'].split('.')[-1]} -> {e['child'].split('.')[-1]} ({e['operator']})"
                       for e in r.get("evolution", []))
        cells.append(html.escape(ev))
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table>{head}{''.join(body)}</table>"


def _compute_line(last: dict) -> str:
    c = last.get("compute_cumulative")
    if c is None:
        return "not recorded"
    flops = "" if "flops" not in c else (f"{c['flops']:.3e} FLOPs ({c['budget_flops']:.3e} charged to the budget; "
                                         + ", ".join(f"{k} {v:.2e}" for k, v in sorted(c["phase_flops"].items()))
                                         + "), ")
    return (f"{flops}{c['tokens']:,} tokens ({c.get('prompt_tokens', 0):,} prompt, {c['generated_tokens']:,} "
            f"generated, {c['trained_tokens']:,} trained) and {c['sandbox_jobs']:,} sandbox jobs"
            + (f" ({c['sandbox_cpu_seconds']:.1f} CPU seconds)" if "sandbox_cpu_seconds" in c else ""))


TIMELINE_SERVICES = ("inference", "sandbox", "league", "trainer", "evolver")
TIMELINE_STEPS = 10  # the last steps drawn: more would be bars too thin to read


def plot_timeline(rows, path: Path) -> bool:
    """Each step's phases per service on one time axis (the last TIMELINE_STEPS steps), coloured and labelled by
    step, so overlapped steps (loop.max_staleness >= 1) show a step's games beside the previous update; beside it
    the idle fraction of the trainer and inference per step. False when the metrics hold no timeline."""
    shown = [r for r in rows if r.get("timeline")][-TIMELINE_STEPS:]
    if not shown:
        return False
    fig, (ax, idle) = plt.subplots(1, 2, figsize=(14, 3.6), gridspec_kw={"width_ratios": [3, 1]})
    t0 = min(s["start"] for r in shown for s in r["timeline"])
    colors = plt.get_cmap("tab10")
    for r in shown:
        for s in r["timeline"]:
            if s["service"] not in TIMELINE_SERVICES:
                continue
            y = TIMELINE_SERVICES.index(s["service"])
            ax.broken_barh([(s["start"] - t0, max(s["end"] - s["start"], 1e-3))], (y - 0.35, 0.7),
                           color=colors(s["step"] % 10), alpha=0.85)
            if s["end"] - s["start"] > 0.02 * (shown[-1]["timeline"][-1]["end"] - t0 or 1):
                ax.text((s["start"] + s["end"]) / 2 - t0, y, f"{s['step']}:{s['phase']}", ha="center",
                        va="center", fontsize=6)
    ax.set_yticks(range(len(TIMELINE_SERVICES)), TIMELINE_SERVICES)
    ax.set_xlabel("seconds")
    ax.set_title("phases per service (label: step:phase)")
    for service in ("trainer", "inference"):
        pts = [(r["step"], r["idle_fraction"][service]) for r in shown
               if r.get("idle_fraction", {}).get(service) is not None]
        if pts:
            idle.plot(*zip(*pts), marker="o", label=service)
    idle.set_ylim(-0.05, 1.05)
    idle.set_xlabel("step")
    idle.set_title("idle fraction")
    idle.legend(fontsize=8)
    save_figure(fig, path, DPI)
    return True


def members_table(rows: list[dict], cfg) -> str:
    """The last step's members with their role, version and LoRA rank (spec 9, "Mixed ranks": members may hold
    different ranks), the rank read from each adapter's stored config."""
    from populora.store import ArtifactStore, StoreError

    population = rows[-1].get("population") or {}
    if not population:
        return "<p>No members recorded.</p>"
    store = ArtifactStore(cfg.store_root) if cfg is not None else None
    body = []
    for adapter_id, m in sorted(population.items()):
        try:
            rank = str(store.rank(adapter_id)) if store is not None else "-"
        except (OSError, ValueError, KeyError, StoreError):
            rank = "-"
        cells = [adapter_id, m.get("role", ""), f"v{m.get('version', '')}", rank]
        body.append('<tr class="member">' + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return ("<table><tr><th>member</th><th>role</th><th>version</th><th>LoRA rank</th></tr>" + "".join(body)
            + "</table>")


def _stopped(last: dict) -> str:
    return f" The run stopped early: {html.escape(last['stopped'])}." if last.get("stopped") else ""


def write_report(run_dir: Path, cfg=None) -> Path:
    rows = read_metrics(run_dir)
    if not rows:
        raise FileNotFoundError(f"{run_dir / 'metrics.jsonl'} has no steps: nothing to report")
    plots = {"solve_rate.png": plot_solve_rate, "complexity.png": plot_complexity, "ratings.png": plot_ratings,
             "lineage.png": plot_lineage, "compute.png": plot_compute}
    for name, fn in plots.items():
        fn(rows, run_dir / name)
    points = eval_points(rows, run_dir)
    eval_plot = '<img src="evals.png">' if plot_evals(points, run_dir / "evals.png") else ""
    timeline = '<img src="timeline.png">' if plot_timeline(rows, run_dir / "timeline.png") else ""
    rejections: dict[str, int] = {}
    for r in rows:
        for m in r.get("task_types", {}).values():
            for reason, n in m.get("rejections", {}).items():
                rejections[reason] = rejections.get(reason, 0) + n
    total_s = sum(r["step_seconds"] for r in rows)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>PopuLoRA run {html.escape(run_dir.name)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}img{{max-width:100%}}</style></head><body>
<h1>PopuLoRA run {html.escape(run_dir.name)}</h1>
<p>{len(rows) - 1} training steps, {total_s:.0f} s in all; compute spent {_compute_line(rows[-1])}.{_stopped(rows[-1])}
Rejection reasons over the run: {html.escape(json.dumps(rejections, sort_keys=True))}</p>
<h2>Solve rate per task type</h2><img src="solve_rate.png">
<h2>Problem complexity</h2><img src="complexity.png">
<h2>Compute</h2><img src="compute.png">
<h2>Ratings and evolution events</h2><img src="ratings.png">
<h2>Lineage</h2><img src="lineage.png">
<h2>Members after the last step</h2>{members_table(rows, cfg)}
<h2>Children and their parents</h2>{evolution_table(rows, cfg)}
<h2>Timeline: phases per service and idle time</h2>{timeline}
<h2>Where a step's time goes: each phase against the machine's peak</h2>{efficiency_table(rows)}
<h2>Held-out evaluation</h2>{eval_plot}{_eval_table(points)}
<h2>Steps</h2>{_table(rows)}
<p>Raw data: <a href="metrics.jsonl">metrics.jsonl</a>; TensorBoard: <code>tensorboard --logdir {html.escape(str(run_dir / 'tb'))}</code></p>
</body></html>"""
    path = run_dir / "report.html"
    path.write_text(page)
    return path


def main(args) -> int:
    run_dir = Path(args.run)
    if not (run_dir / "metrics.jsonl").exists():
        why = names.reason(args.run, names.MAX_RUN_ID)
        if why:  # not a run directory; and as a run id it must not lead out of --output-dir
            print(f"error: RUN {args.run!r} is not a run directory (no metrics.jsonl there), nor a run id: {why}",
                  file=sys.stderr)
            return 2
        run_dir = Path(args.output_dir) / args.run
    if not (run_dir / "metrics.jsonl").exists():
        print(f"error: no run at {args.run} or {run_dir} (expected a metrics.jsonl)", file=sys.stderr)
        return 2
    print(write_report(run_dir))
    return 0
