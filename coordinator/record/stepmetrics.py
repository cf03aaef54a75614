"""Per-step metrics computed from a step's stored records (so a resumed run writes them identically), written as
JSONL and TensorBoard scalars; the report reads the JSONL."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from statistics import mean, pstdev

from coordinator.run.step import Prepared, StepRecord
from populora.analysis.dynamics import COMPLEXITY_METRICS
from populora.config import Config
from populora.records import Accounted, Evaluated, Usage, to_json
from populora.tasks import student_reward, teacher_reward


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return mean(xs) if xs else None


COMPLEXITY_KEYS = COMPLEXITY_METRICS  # spec 11's metrics, one tuple for the metrics, the dynamics and the trends


def complexity_spread(programs: list[dict]) -> dict[str, dict]:
    """Mean, population standard deviation, min and max of each complexity metric (spec 11) over the valid programs
    of a step: the spread says whether the teachers still propose varied problems or collapse onto one shape."""
    out = {}
    for key in COMPLEXITY_KEYS:
        xs = [c[key] for c in programs if c.get(key) is not None]
        out[key] = ({"mean": mean(xs), "std": pstdev(xs), "min": min(xs), "max": max(xs), "n": len(xs)} if xs
                    else {"mean": None, "std": None, "min": None, "max": None, "n": 0})
    return out


def compute_metrics(spent: Accounted) -> dict:
    """What a step spent (spec 14), in total and per adapter."""
    def flat(u: Usage) -> dict:
        return {"generated_tokens": u.generated_tokens, "trained_tokens": u.trained_tokens, "tokens": u.tokens,
                "prompt_tokens": u.prompt_tokens, "sandbox_jobs": u.sandbox_jobs, "flops": u.flops}

    return {"compute": {**flat(spent.total), "sandbox_cpu_seconds": spent.sandbox_cpu_seconds},
            "compute_per_adapter": {a: flat(u) for a, u in spent.adapters.items()},
            "compute_per_phase": {k: flat(u) for k, u in spent.phases.items()}}


def eval_metrics(evaluated: Evaluated | None) -> dict:
    """The eval phase's scores (docs/eval.md): pass@1 per adapter version (label), the population's mean."""
    if evaluated is None:
        return {}
    members = [s for s in evaluated.scores if s.adapter_id]
    return {"eval": {"benchmark": evaluated.benchmark, "n_problems": max((s.n_problems for s in evaluated.scores),
                                                                         default=0),
                     "pass_at_1": {s.label: s.pass_at_1 for s in evaluated.scores},
                     "adapters": {s.label: s.adapter_id or None for s in evaluated.scores},
                     "population_mean": _mean(s.pass_at_1 for s in members),
                     "population_best": max((s.pass_at_1 for s in members), default=None),
                     "seconds": evaluated.seconds, "generated_tokens": evaluated.generated_tokens}}


def prepared_metrics(prepared: Prepared, seconds: dict[str, float]) -> dict:
    s, w = prepared.seeded, prepared.warmed
    out = {"step": 0, "seconds": seconds, "step_seconds": sum(seconds.values()), "seed_sizes": s.sizes,
           "seed_reasons": s.reasons, "seed_rounds": s.rounds, **compute_metrics(prepared.spent)}
    if w.adapter_id:
        out["warm_start"] = {"adapter_id": w.adapter_id, "cached": w.cached, "examples": w.examples,
                             "tokens": w.tokens, "loss_first": w.losses[0] if w.losses else None,
                             "loss_last": w.losses[-1] if w.losses else None, "fit_seconds": w.fit_seconds}
    out.update(eval_metrics(prepared.evaluated))
    return out


def step_metrics(cfg: Config, r: StepRecord, seconds: dict[str, float]) -> dict:
    """Valid-proposal and solve rates, rewards and complexity per task type; ratings, updates, evolution."""
    out: dict = {"step": r.step, "seconds": seconds, "step_seconds": sum(seconds.values())}
    proposals, verdicts = r.proposed.proposals, r.validated.verdicts
    attempts, rho, outcomes = r.solved.attempts, r.checked.rho, r.checked.outcomes
    rewards = cfg.rewards
    by_type: dict[str, dict] = {}
    for tt in cfg.tasks.task_types:
        props = [p for p in proposals if p.task_type == tt]
        valid = [p for p in props if verdicts[p.id].valid]
        valid_ids = {p.id for p in valid}
        atts = [a for a in attempts if a.task_id in valid_ids]
        cx = [verdicts[p.id].task.complexity or {} for p in valid]
        by_type[tt] = {
            "proposals": len(props),
            "valid_rate": len(valid) / len(props) if props else None,
            "rejections": dict(Counter(verdicts[p.id].reason for p in props if not verdicts[p.id].valid)),
            "solve_rate": _mean(rho.get(p.id) for p in valid),
            "teacher_reward": _mean(teacher_reward(verdicts[p.id].valid, rho.get(p.id), rewards.teacher_reward,
                                                   rewards, p.task_type) for p in props),
            "student_reward": _mean(student_reward(outcomes[a.id], rewards) for a in atts),
            "ast_depth": _mean(c.get("ast_depth") for c in cx),
            "cyclomatic": _mean(c.get("cyclomatic") for c in cx),
            "lines_of_code": _mean(c.get("lines_of_code") for c in cx),
        }
    out["task_types"] = by_type
    student_of = {a.task_id: a.student for a in attempts}
    solved_by: dict[str, list[float]] = defaultdict(list)
    for p in proposals:
        if rho.get(p.id) is not None:
            solved_by[student_of[p.id]].append(rho[p.id])
    out["student_solve_rate"] = {s: _mean(v) for s, v in sorted(solved_by.items())}
    out["valid_rate"] = sum(verdicts[p.id].valid for p in proposals) / len(proposals) if proposals else None
    valid_all = [p for p in proposals if verdicts[p.id].valid]
    out["solve_rate"] = _mean(rho.get(p.id) for p in valid_all)  # mean rho over every valid task of the step
    out["complexity"] = complexity_spread([verdicts[p.id].task.complexity or {} for p in valid_all])
    # every valid program with its teacher and complexity: the comparison's dynamics (spec 11: coverage, shapes,
    # behavioural diversity, the complexity trend) are computed from these
    out["valid_programs"] = [{"teacher": p.teacher, "task_type": p.task_type, "program": verdicts[p.id].task.program,
                              **{k: (verdicts[p.id].task.complexity or {}).get(k) for k in COMPLEXITY_KEYS}}
                             for p in valid_all]
    out["outcomes"] = dict(Counter(outcomes.values()))
    gen_tokens = {"propose": sum(len(p.response_token_ids) for p in proposals),
                  "solve": sum(len(a.response_token_ids) for a in attempts)}
    out["tokens"] = gen_tokens
    out["tokens_per_s"] = {k: v / seconds[k] for k, v in gen_tokens.items() if seconds.get(k)}
    out["ratings"] = to_json(r.rated.ratings)
    out["matches_reported"] = len(r.rated.reported)
    out["updates"] = to_json(r.updated.stats)
    out["population"] = to_json(r.population)
    if r.evolved is not None:
        out["evolution"] = to_json(r.evolved.events)
    if cfg.loop.max_staleness:
        out["staleness"] = staleness_metrics(r)
    out.update(compute_metrics(r.spent))
    out.update(eval_metrics(r.evaluated))
    return out


def staleness_metrics(r: StepRecord) -> dict:
    """Overlapped steps (spec 16): rollouts by staleness v - b over the step's updates, rollouts dropped, mean |r - 1|,
    clipped fraction and the share of tokens drawn from a truncated top-p nucleus (means over the adapters updated),
    and the time from the update's end to the new versions served (update_to_served_ms)."""
    hist: Counter = Counter()
    stats = list(r.updated.stats.values())
    for s in stats:
        hist.update({int(k): n for k, n in s.staleness.items()})
    return {"histogram": {str(k): n for k, n in sorted(hist.items())}, "max": max(hist, default=0),
            "dropped": sum(s.dropped for s in stats), "ratio_dev": _mean(s.ratio_dev for s in stats),
            "clipped_fraction": _mean(s.clipped_fraction for s in stats),
            "truncated_fraction": _mean(s.truncated_fraction for s in stats),
            "update_to_served_ms": r.updated.served_ms}


class MetricsWriter:
    """metrics.jsonl (one object per step) and TensorBoard scalars under <run_dir>/tb."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "metrics.jsonl"
        self._tb = None

    @property
    def tb(self):
        if self._tb is None:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tb"))
        return self._tb

    def rewrite(self, rows: list[dict]) -> None:
        """Replace metrics.jsonl with rows (used on resume: metrics come from the stored phases)."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        tmp.replace(self.path)

    def write(self, row: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
        self._scalars(row)

    def _scalars(self, row: dict) -> None:
        step = row["step"]
        tb = self.tb
        for phase, s in row.get("seconds", {}).items():
            tb.add_scalar(f"seconds/{phase}", s, step)
        for tt, m in row.get("task_types", {}).items():
            for key in ("valid_rate", "solve_rate", "teacher_reward", "student_reward", "ast_depth", "cyclomatic",
                        "lines_of_code"):
                if m.get(key) is not None:
                    tb.add_scalar(f"{key}/{tt}", m[key], step)
            for reason, n in m.get("rejections", {}).items():
                tb.add_scalar(f"rejections/{tt}/{reason}", n, step)
        for key, spread in row.get("complexity", {}).items():
            if spread.get("std") is not None:
                tb.add_scalar(f"complexity_std/{key}", spread["std"], step)
        for kind, v in row.get("tokens_per_s", {}).items():
            tb.add_scalar(f"tokens_per_s/{kind}", v, step)
        for key, v in row.get("compute_cumulative", {}).items():
            if isinstance(v, dict):  # FLOPs per phase
                for phase, f in v.items():
                    tb.add_scalar(f"compute/{key}/{phase}", f, step)
            else:
                tb.add_scalar(f"compute/{key}", v, step)
        for adapter, r in row.get("ratings", {}).items():
            tb.add_scalar(f"rating_mu/{adapter}", r["mu"], step)
            tb.add_scalar(f"rating_skill/{adapter}", r["skill"], step)
        for adapter, s in row.get("updates", {}).items():
            tb.add_scalar(f"loss/{adapter}", s["loss"], step)
        eff = row.get("efficiency") or {}
        for phase, e in {**eff.get("phases", {}), **({"step": eff["step"]} if "step" in eff else {})}.items():
            for key in ("mfu", "roofline_fraction"):
                if e.get(key) is not None:
                    tb.add_scalar(f"efficiency/{key}/{phase}", e[key], step)
        for service, v in row.get("idle_fraction", {}).items():
            if v is not None:
                tb.add_scalar(f"idle_fraction/{service}", v, step)
        for key in ("max", "ratio_dev", "clipped_fraction", "truncated_fraction", "update_to_served_ms"):
            if row.get("staleness", {}).get(key) is not None:
                tb.add_scalar(f"staleness/{key}", row["staleness"][key], step)
        ev = row.get("eval")
        if ev:
            for key in ("population_mean", "population_best"):
                if ev.get(key) is not None:
                    tb.add_scalar(f"eval/{ev['benchmark']}/{key}", ev[key], step)
        tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
