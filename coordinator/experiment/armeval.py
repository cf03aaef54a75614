"""The experiment's evaluations: every arm's population at each compute checkpoint (spec 14), in one multi-LoRA
batch per arm and benchmark, written to evals/<run>.<benchmark>.json; a file made with the same settings of an arm
trained as far is read back, not redone."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from coordinator.experiment.checkpointeval import (
    HELDOUT,
    HELDOUT_PROBLEMS,
    WARM,
    budget_of,
    checkpoints_of,
    label,
    population_at,
)
from coordinator.experiment.evalfiles import eval_path, write_json
from coordinator.experiment.plan import Arm, Experiment
from coordinator.modelsize import model_size
from coordinator.stepmetrics import read_metrics
from populora.analysis.flops import FORWARD_FLOPS_PER_PARAM

log = logging.getLogger(__name__)


def eval_limit(exp: Experiment, benchmark: str) -> int | None:
    """Problems to score: --limit when given; the held-out benchmark otherwise generates HELDOUT_PROBLEMS, so at
    least 300 are left for scoring after the validation part (coordinator/experiment/checkpointeval.py)."""
    if exp.limit is not None:
        return exp.limit
    return HELDOUT_PROBLEMS if benchmark == HELDOUT else None


def eval_settings(exp: Experiment) -> dict:
    """What decides an evaluation's scores besides the arm and the benchmark; a file made with other settings is
    redone."""
    e = exp.cfg.eval
    return {"limit": exp.limit, "samples": exp.samples, "temperature": e.temperature,
            "max_new_tokens": e.max_new_tokens, "seed": exp.cfg.run.seed, "checkpoints": list(e.checkpoints),
            "members": e.members}


def arm_rows(arm: Arm) -> list[dict]:
    return read_metrics(Path(arm.cfg.run.output_dir) / arm.run_id)


def arm_state(arm: Arm) -> dict:
    """How far the arm trained (its last step and the tokens spent): an evaluation of an arm trained further since
    (a grown budget) is redone."""
    rows = arm_rows(arm)
    last = rows[-1] if rows else {"step": -1}
    return {"step": last["step"], "tokens": last.get("compute_cumulative", {}).get("tokens", 0)}


def experiment_budget(exp: Experiment, seeds: list[int] | None = None) -> float | None:
    """The compute the checkpoints divide (checkpointeval.budget_of), over the arms of `seeds` (all when None; a FLOP
    budget is the same for any); None when the arms recorded no FLOPs (runs from before FLOPs were counted: only
    their final populations are scored)."""
    axes = {a.run_id: [(r["step"], r.get("compute_cumulative", {}).get("budget_flops", 0)) for r in arm_rows(a)]
            for a in exp.arms if seeds is None or a.seed in seeds}
    try:
        return budget_of(exp.cfg.run.budget_flops, axes)
    except ValueError:
        return None


def checkpoint_targets(exp: Experiment, arm: Arm, budget: float | None) -> dict[str, int]:
    """{label: step} of the adapter versions to score for `arm`: its population (the members eval.members names) at
    each checkpoint step of eval.checkpoints (a step at 0 is the warm start, scored once for the experiment);
    without a budget, the final population."""
    rows = arm_rows(arm)
    if budget is None:
        steps = [rows[-1]["step"]] if rows else []
    else:
        other = next(a for a in exp.arms if a.seed == arm.seed and a.name != arm.name)
        cps = checkpoints_of({arm.name: rows, other.name: arm_rows(other)}, budget, exp.cfg.eval.checkpoints)
        steps = sorted({cp.arms[arm.name].step or 0 for cp in cps})
    out: dict[str, int] = {}
    for step in steps:
        for adapter_id, version in (population_at(rows, step, exp.cfg.eval.members) or {}).items():
            out.setdefault(label(adapter_id, version), step)
    return out


def evaluate_arm(exp: Experiment, arm: Arm, benchmark: str, targets: dict[str, int], with_start: bool) -> dict:
    """The arm's adapter versions named in `targets` on `benchmark`, greedy unless eval.temperature says otherwise,
    in one multi-LoRA batch (spec 15); with `with_start`, the warm-start adapter every arm began from too (spec 13:
    identical in all arms, so it is scored once). The members' scores are also recorded in the arm's league, as
    `populora eval --run` records them. Returns the layout `populora eval --out` writes, with the tokens the
    evaluation generated and their FLOPs (2N each; off the training budget, spec 14)."""
    from coordinator.experiment.evaluate import expected_cache, open_eval_services, record, scores_of
    from populora.evals import EvalTarget, evaluate
    from populora.evals.progress import progress_text
    from populora.rpc import ServiceError
    from populora.store import ArtifactStore

    cfg, settings = arm.cfg, eval_settings(exp)
    store = ArtifactStore(cfg.store_root)
    services = open_eval_services(cfg, league=True)
    generated = []

    def progress(event: str, info: dict) -> None:
        if line := progress_text(event, info):
            log.info("evaluating %s on %s: %s", arm.run_id, benchmark, line)
        elif event == "generated":
            generated.append(info.get("tokens", 0))

    try:
        chosen = []
        for name in targets:
            adapter_id, _, version = name.rpartition("@v")
            ref = store.ref(adapter_id, int(version))
            chosen.append(EvalTarget(name, adapter_id, ref.version, str(store.path_of(ref))))
        warm = f"{arm.run_id}.warm"
        if with_start and store.versions(warm):
            ref = store.latest(warm)
            chosen.insert(0, EvalTarget(WARM, warm, ref.version, str(store.path_of(ref))))
        results = evaluate(services, chosen, benchmark, limit=eval_limit(exp, benchmark), samples=exp.samples,
                           temperature=settings["temperature"], seed=settings["seed"], data=cfg.eval.data or None,
                           max_new_tokens=settings["max_new_tokens"], chat=cfg.model.chat_template,
                           code_f_inputs=cfg.tasks.code_f_inputs, timeout_s=cfg.eval.timeout_s, run_id=arm.run_id,
                           cache=expected_cache(cfg), progress=progress)
        members = [r for r in results if r.adapter_id != warm]
        try:
            record(services.league, arm.run_id, benchmark, scores_of(members),
                   {n.rpartition("@v")[0]: step for n, step in targets.items()})
        except ServiceError as e:  # a member retired since its checkpoint is no longer in the league
            log.warning("scores of %s on %s not recorded in the league: %s", arm.run_id, benchmark, e.message)
    finally:
        services.close()
    n_problems = max((r.n_problems for r in results), default=0)
    tokens = sum(generated)
    size = model_size(cfg)
    # every target answers the same problems: their tokens are charged at the mean of their N (spec 9, "Mixed ranks")
    sizes = [size.with_rank(store.rank(t.adapter_id)) for t in chosen] if len(cfg.ranks) > 1 else []
    n = sum(sizes) // len(sizes) if sizes else size.with_adapter
    return {"benchmark": benchmark, "limit": eval_limit(exp, benchmark) or n_problems, "samples": exp.samples,
            "settings": settings, "targets": targets, "generated_tokens": tokens,
            "flops": FORWARD_FLOPS_PER_PARAM * n * tokens,
            "results": [r.to_json() for r in results]}


def evaluate_arms(exp: Experiment, seeds: list[int] | None = None) -> list[Path]:
    """Every arm (of `seeds`, when given) on every benchmark at every checkpoint (the experiment's first arm's
    evaluation also scores the warm start); a scores file made with the same settings, of the arm trained as far as
    it is now, at the same budget, is not redone. Returns the files written by this call."""
    written = []
    budget = experiment_budget(exp, seeds)
    for i, arm in enumerate(exp.arms):
        if seeds is not None and arm.seed not in seeds:
            continue
        trained = arm_state(arm)
        for benchmark in exp.benchmarks:
            path = eval_path(exp.out_dir, arm.run_id, benchmark)
            if path.exists():
                done = json.loads(path.read_text())
                if (done.get("settings"), done.get("trained"), done.get("budget")) == (eval_settings(exp), trained,
                                                                                       budget):
                    log.info("evaluation of %s on %s done before, not redone", arm.run_id, benchmark)
                    continue
            targets = checkpoint_targets(exp, arm, budget)
            log.info("evaluating %s on %s: %d adapter versions", arm.run_id, benchmark, len(targets))
            start = time.perf_counter()
            scores = evaluate_arm(exp, arm, benchmark, targets, i == 0)
            scores.update({"trained": trained, "budget": budget, "seconds": time.perf_counter() - start})
            write_json(path, scores)
            written.append(path)
    return written
