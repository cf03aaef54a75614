"""One seed's likelihood score on one task benchmark (populora.evals.likelihood): every version the seed's pass@1
scoring answers with (both arms at every compute checkpoint, the warm start) scores the reference answer of each
problem of the benchmark's likelihood set, all versions in one Score batch per part, the curve's versions on the
first `eval.curve_limit` problems; parts are kept when done (evalparts/s<seed>.<benchmark>-logprob.<k>.json) and each
arm gets evals/<run>.<benchmark>-logprob.json, in the layout of a pass@1 file with each problem's `value` the mean
log-probability per token (coordinator/experiment/checkpointeval.py compares it as it compares pass values).

The targets, problems and parts come from coordinator/experiment/seedeval.py, which calls this module.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from coordinator.experiment.armeval import eval_settings
from coordinator.experiment.evalfiles import eval_path, write_json
from coordinator.experiment.plan import Arm, Experiment
from coordinator.run.modelsize import model_size
from populora.analysis.flops import FORWARD_FLOPS_PER_PARAM

log = logging.getLogger(__name__)


def score_parts(exp: Experiment, services, seed: int, name: str, parts: list[tuple[list, bool]], chosen: dict,
                final: set[str], budget: float | None, trained: dict) -> list[dict]:
    """Each part's likelihoods (made, or read back when its file has the same key): {"key", "tokens" (the prompt
    and answer tokens scored), "seconds", "results" [LikelihoodResult json]}."""
    from coordinator.run.phases.evaluate import expected_cache
    from populora.evals.likelihood import likelihood

    made = []
    settings = eval_settings(exp)
    for k, (chunk, curve) in enumerate(parts):
        names = [n for n in chosen if curve or n in final]
        key = {"benchmark": name, "settings": settings, "budget": budget, "trained": trained, "targets": names,
               "problems": [p.id for p in chunk]}
        path = exp.out_dir / "evalparts" / f"s{seed}.{name}.{k:03d}.json"
        if path.exists() and json.loads(path.read_text()).get("key") == key:
            made.append(json.loads(path.read_text()))
            continue
        log.info("likelihood of seed %d on %s: part %d/%d, %d problems, %d versions", seed, name, k + 1, len(parts),
                 len(chunk), len(names))
        start = time.perf_counter()
        results = likelihood(services, [chosen[n] for n in names], name, chunk, cache=expected_cache(exp.cfg))
        seconds = time.perf_counter() - start
        rows = sum(len(r.problems) for r in results)
        log.info("likelihood of seed %d on %s: part %d/%d, %d rows in %.1f s (%.3f s a problem and version)", seed,
                 name, k + 1, len(parts), rows, seconds, seconds / max(rows, 1))
        part = {"key": key, "seconds": seconds, "results": [r.to_json() for r in results],
                "tokens": sum(p["tokens"] + p.get("prompt_tokens", 0) for r in results for p in r.problems)}
        write_json(path, part)
        made.append(part)
    return made


def write_files(exp: Experiment, arms: list[Arm], name: str, parts: list[dict], chosen: dict, owner: dict[str, str],
                per_arm: dict, budget: float | None, trained: dict, seconds: float) -> list[Path]:
    """Each arm's likelihood file from the parts: its versions' problems joined, their mean, the FLOPs of the
    prompt passes charged to the arms by their share of each part's versions (2N a token, off the budget: spec
    14)."""
    from populora.evals.likelihood import KIND, LikelihoodResult

    problems: dict[str, list[dict]] = {n: [] for n in chosen}
    tokens = dict.fromkeys(per_arm, 0.0)
    scored_seconds = 0.0
    for part in parts:
        labels = part["key"]["targets"]
        for r in map(LikelihoodResult.from_json, part["results"]):
            problems[r.label] += r.problems
        for label in labels:
            tokens[owner[label]] += part["tokens"] / len(labels)
        scored_seconds += part.get("seconds", 0.0)
    n = model_size(arms[0].cfg).with_adapter
    written = []
    for arm in arms:
        targets, _ = per_arm[arm.run_id]
        results = [LikelihoodResult(label, chosen[label].adapter_id, chosen[label].version, name, problems[label],
                                    arm.run_id) for label in chosen if owner[label] == arm.run_id]
        n_problems = max((len(r.problems) for r in results), default=0)
        body = {"benchmark": name, "kind": KIND, "limit": n_problems, "samples": 1, "settings": eval_settings(exp),
                "targets": targets, "scored_tokens": round(tokens[arm.run_id]),
                "flops": FORWARD_FLOPS_PER_PARAM * n * round(tokens[arm.run_id]), "parts": len(parts),
                "results": [r.to_json() for r in results], "trained": trained[arm.run_id], "budget": budget,
                "seconds": seconds, "scoring_seconds": scored_seconds}
        path = eval_path(exp.out_dir, arm.run_id, name)
        write_json(path, body)
        written.append(path)
    return written
