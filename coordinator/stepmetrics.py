"""Per-step metrics computed from the persisted phase results (so a resumed run rewrites them identically), written
as JSONL and TensorBoard scalars."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from statistics import mean

from coordinator.context import RunContext
from populora.tasks import student_reward, teacher_reward


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return mean(xs) if xs else None


def step_metrics(ctx: RunContext, step: int, phase_seconds: dict[str, float]) -> dict:
    cfg = ctx.cfg
    out: dict = {"step": step, "seconds": phase_seconds, "step_seconds": sum(phase_seconds.values())}
    if step == 0:
        seed = ctx.result(0, "seed")
        out.update({"seed_sizes": seed["sizes"], "seed_reasons": seed["reasons"], "seed_rounds": seed["rounds"]})
        return out
    proposals = ctx.result(step, "propose")["proposals"]
    verdicts = ctx.result(step, "validate")["verdicts"]
    attempts = ctx.result(step, "solve")["attempts"]
    check = ctx.result(step, "check")
    by_type: dict[str, dict] = {}
    for tt in cfg.tasks.task_types:
        props = [p for p in proposals if p["task_type"] == tt]
        valid = [p for p in props if verdicts[p["id"]]["valid"]]
        rhos = [check["rho"].get(p["id"]) for p in valid]
        atts = [a for a in attempts if a["task_id"] in {p["id"] for p in valid}]
        cx = [verdicts[p["id"]]["task"].get("complexity") or {} for p in valid]
        by_type[tt] = {
            "proposals": len(props),
            "valid_rate": len(valid) / len(props) if props else None,
            "rejections": dict(Counter(verdicts[p["id"]]["reason"] for p in props if not verdicts[p["id"]]["valid"])),
            "solve_rate": _mean(rhos),
            "teacher_reward": _mean(teacher_reward(verdicts[p["id"]]["valid"], check["rho"].get(p["id"]),
                                                   cfg.rewards.teacher_reward, cfg.rewards) for p in props),
            "student_reward": _mean(student_reward(check["outcomes"][a["id"]], cfg.rewards) for a in atts),
            "ast_depth": _mean(c.get("ast_depth") for c in cx),
            "cyclomatic": _mean(c.get("cyclomatic") for c in cx),
            "lines_of_code": _mean(c.get("lines_of_code") for c in cx),
        }
    out["task_types"] = by_type
    solved_by: dict[str, list[float]] = defaultdict(list)
    for p in proposals:
        r = check["rho"].get(p["id"])
        if r is not None:
            student = next(a["student"] for a in attempts if a["task_id"] == p["id"])
            solved_by[student].append(r)
    out["student_solve_rate"] = {s: _mean(v) for s, v in sorted(solved_by.items())}
    out["valid_rate"] = (sum(verdicts[p["id"]]["valid"] for p in proposals) / len(proposals)) if proposals else None
    out["outcomes"] = dict(Counter(check["outcomes"].values()))
    gen_tokens = {"propose": sum(len(p["response_token_ids"]) for p in proposals),
                  "solve": sum(len(a["response_token_ids"]) for a in attempts)}
    out["tokens"] = gen_tokens
    out["tokens_per_s"] = {k: v / phase_seconds[k] for k, v in gen_tokens.items() if phase_seconds.get(k)}
    rate = ctx.result(step, "rate")
    out["ratings"] = rate["ratings"]
    out["matches_reported"] = len(rate["reported"])
    update = ctx.result(step, "update")
    out["updates"] = update["stats"]
    out["population"] = update["population"]
    evolve = ctx.maybe_result(step, "evolve")
    if evolve is not None:
        out["evolution"] = evolve["events"]
        out["population"] = evolve["population"]
    return out


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
        """Replace metrics.jsonl with rows (used on resume: metrics come from the persisted phases)."""
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
        for kind, v in row.get("tokens_per_s", {}).items():
            tb.add_scalar(f"tokens_per_s/{kind}", v, step)
        for adapter, r in row.get("ratings", {}).items():
            tb.add_scalar(f"rating_mu/{adapter}", r["mu"], step)
            tb.add_scalar(f"rating_skill/{adapter}", r["skill"], step)
        for adapter, s in row.get("updates", {}).items():
            tb.add_scalar(f"loss/{adapter}", s["loss"], step)
        tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
