"""The in-training `eval` phase (spec 15): the population's held-out scores every `eval.every` steps, in one
multi-LoRA batch, recorded in the league; and the pieces `populora eval` shares with it (scores as records, where
EvalPlus's expected outputs are cached). The harness itself is populora.evals."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from populora.config import Config
from populora.evals import EvalResult, EvalTarget, evaluate
from populora.evals.progress import progress_text
from populora.pb import league_pb2
from populora.records import EvalScore, Evaluated, Population, ProblemScore

log = logging.getLogger(__name__)


def scores_of(results: list[EvalResult]) -> list[EvalScore]:
    return [EvalScore(r.adapter_id or "", r.version, r.label, r.pass_at_1, {str(k): v for k, v in r.pass_at_k.items()},
                      r.n_problems, r.samples, [ProblemScore(p.id, p.passed, p.n, p.error) for p in r.problems])
            for r in results]


def record(league, run_id: str, benchmark: str, scores: list[EvalScore], steps: dict[str, int]) -> int:
    """Store scores in the league (replacing an earlier record of the same version and benchmark)."""
    pb = [league_pb2.EvalScore(
        adapter_id=s.adapter_id, version=s.version, benchmark=benchmark, step=steps.get(s.adapter_id, 0),
        label=s.label, n_problems=s.n_problems, samples=s.samples, pass_at_1=s.pass_at_1,
        pass_at_k={int(k): v for k, v in s.pass_at_k.items()},
        problems=[league_pb2.EvalProblem(problem_id=p.id, passed=p.passed, n=p.n, error=p.error) for p in s.problems])
        for s in scores]
    return league.RecordEvals(league_pb2.RecordEvalsRequest(run_id=run_id, scores=pb)).recorded


def expected_cache(cfg: Config) -> Path:
    """Where EvalPlus's expected outputs are cached: the populora cache (model.cache_dir, $POPULORA_CACHE)."""
    from populora.models import cache_dir

    return cache_dir(cfg.model.cache_dir)


def logged(event: str, info: dict, seen: dict) -> None:
    """The in-training phase's progress: stage lines in the log, the totals kept for its record."""
    if line := progress_text(event, info):
        log.info("eval: %s", line)
    else:
        seen.update({f"{event}_{k}": v for k, v in info.items()})


def eval_phase(run, step: int, population: Population) -> Evaluated:
    """The `eval` phase (every `eval.every` steps): the whole population, at the versions that play the next step,
    on `eval.benchmark`'s first `eval.limit` problems, in one multi-LoRA batch; the bare base model too at the
    first evaluation (`eval.base`). Scores go to the league, keyed by version, so a re-run phase replaces them."""
    cfg = run.cfg
    e = cfg.eval
    targets = [EvalTarget(f"{a}@v{m.version}", a, m.version, str(run.store.version_dir(a, m.version)))
               for a, m in sorted(population.items())]
    if e.base and step == 0:
        targets.insert(0, EvalTarget("base", None, 0, None))
    seen: dict[str, float] = {}
    start = time.perf_counter()
    results = evaluate(run.services, targets, e.benchmark, limit=e.limit, samples=e.samples,
                       temperature=e.temperature, seed=run.seed("eval", step), data=e.data or None,
                       max_new_tokens=e.max_new_tokens, chat=cfg.model.chat_template,
                       code_f_inputs=cfg.tasks.code_f_inputs, timeout_s=e.timeout_s, run_id=run.run_id,
                       cache=expected_cache(cfg), progress=lambda event, info: logged(event, info, seen))
    scores = scores_of(results)
    record(run.services.league, run.run_id, e.benchmark, scores, {s.adapter_id: step for s in scores})
    return Evaluated(e.benchmark, scores, int(seen.get("generated_tokens", 0)), int(seen.get("scored_jobs", 0)),
                     time.perf_counter() - start)
