"""One seed's scoring (spec 14, 15): both arms' adapter versions at every compute checkpoint, and the warm start once
for the experiment, in one multi-LoRA batch per part of each benchmark. The checkpoints before the last (the curve)
answer the benchmark's first `eval.curve_limit` problems, the last checkpoint every problem: scoring every version on
every problem is most of an experiment's cost. Each part's scores are kept as soon as they are made
(evalparts/s<seed>.<benchmark>.<k>.json), so a stopped experiment redoes at most one part; when a benchmark's parts
are all there, each arm's file evals/<run>.<benchmark>.json is written from them, in the layout `populora eval --out`
writes, and is read back, not redone, while the settings, the arms' training and the budget stay the same.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from coordinator.experiment.armeval import (
    arm_rows,
    arm_state,
    checkpoint_targets,
    eval_limit,
    eval_settings,
    experiment_budget,
    seed_rows,
)
from coordinator.experiment.checkpointeval import WARM, checkpoints_of, label, population_at
from coordinator.experiment.evalfiles import OVERLAP_FILE, eval_path, write_json
from coordinator.experiment.headline import HELDOUT, is_likelihood, measured
from coordinator.experiment.plan import Arm, Experiment
from coordinator.experiment.problemsets import PROBLEMS_FILE, enabled, ensure, subset
from coordinator.run.modelsize import model_size
from populora.analysis.flops import FORWARD_FLOPS_PER_PARAM

log = logging.getLogger(__name__)

PART_PROBLEMS = 100  # problems per kept part: a stop loses at most this many answers per scored version


def final_step(exp: Experiment, arm: Arm, budget: float | None) -> int:
    """The arm's step at the last checkpoint (its last step when there is no budget); 0 = the warm start."""
    rows = arm_rows(arm)
    if budget is None:
        return rows[-1]["step"] if rows else 0
    cps = checkpoints_of(seed_rows(exp, arm), budget, exp.cfg.eval.checkpoints)
    return cps[-1].arms[arm.name].step or 0


def seed_targets(exp: Experiment, seed: int, budget: float | None) -> dict[str, tuple[dict[str, int], set[str]]]:
    """{run id: ({label: step} of every version to score, the labels of the last checkpoint)} of the seed's arms."""
    out = {}
    for arm in exp.arms:
        if arm.seed != seed:
            continue
        targets = checkpoint_targets(exp, arm, budget)
        last = population_at(arm_rows(arm), final_step(exp, arm, budget), exp.cfg.eval.members) or {}
        out[arm.run_id] = (targets, {label(a, v) for a, v in last.items()})
    return out


def load_benchmark(exp: Experiment, benchmark: str, kind: str = "pass") -> list:
    """The benchmark's problems as the experiment scores them: `heldout` from `eval.heldout_seed`, the others from
    `eval.data` or their publishers' files in $POPULORA_BENCHMARKS; the first --limit (heldout: 380) when one
    applies; with problem sets, its `kind` subset (pass | likelihood) in the order the file lists it."""
    from populora.evals import EvalError

    problems = all_problems(exp, benchmark)
    ids = subset(exp.problem_sets, benchmark, kind)
    if ids is None:
        return problems
    by_id = {p.id: p for p in problems}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise EvalError(f"the problem sets list {len(unknown)} {benchmark} problems its data does not hold, e.g. "
                        f"{unknown[:3]}: another data file than the one they were drawn from?")
    return [by_id[i] for i in ids]


def attach_problem_sets(exp: Experiment, path: Path | None = None) -> None:
    """The experiment's problem sets (coordinator/experiment/problemsets.py), read from `path` (default: its
    directory's problems file) or drawn and written there, when eval.pass_problems or eval.likelihood_problems asks
    for them; nothing otherwise."""
    if not enabled(exp.cfg):
        return
    exp.problem_sets = ensure(path or exp.out_dir / PROBLEMS_FILE, exp.cfg, exp.limit, exp.benchmarks,
                              lambda b: all_problems(exp, b))


def all_problems(exp: Experiment, benchmark: str) -> list:
    """Every problem of the benchmark the experiment scores from (load_benchmark, before any problem set)."""
    from populora.evals import EvalError, load_problems
    from populora.evals.benchmarks import BenchmarkError

    cfg = exp.cfg
    try:
        if benchmark == HELDOUT:
            return load_problems(HELDOUT, None, eval_limit(exp, benchmark), cfg.eval.heldout_seed,
                                 cfg.tasks.code_f_inputs)
        return load_problems(benchmark, cfg.eval.data or None, eval_limit(exp, benchmark),
                             code_f_inputs=cfg.tasks.code_f_inputs)
    except BenchmarkError as e:
        raise EvalError(str(e)) from None


def parts_of(problems: list, curve_limit: int) -> list[tuple[list, bool]]:
    """(problems, whether the curve's versions answer them) of each part: the first `curve_limit` problems, then the
    rest, each cut into PART_PROBLEMS; with curve_limit 0 the curve answers every part."""
    head = problems[:curve_limit] if curve_limit else problems
    tail = problems[curve_limit:] if curve_limit else []
    return ([(head[i:i + PART_PROBLEMS], True) for i in range(0, len(head), PART_PROBLEMS)]
            + [(tail[i:i + PART_PROBLEMS], False) for i in range(0, len(tail), PART_PROBLEMS)])


def _done(exp: Experiment, arm: Arm, benchmark: str, budget: float | None) -> bool:
    path = eval_path(exp.out_dir, arm.run_id, benchmark)
    if not path.exists():
        return False
    done = json.loads(path.read_text())
    return (done.get("settings"), done.get("trained"), done.get("budget")) == (eval_settings(exp), arm_state(arm),
                                                                             budget)


def evaluate_arms(exp: Experiment, seeds: list[int] | None = None) -> list[Path]:
    """Every arm (of `seeds`, when given) on every benchmark at every checkpoint, a seed at a time (the experiment's
    first seed also scores the warm start); what was done with the same settings, of arms trained as far, at the same
    budget, is not redone. Returns the files written by this call."""
    budget = experiment_budget(exp, seeds)
    written: list[Path] = []
    for seed in exp.seeds:
        if seeds is None or seed in seeds:
            written += evaluate_seed(exp, seed, budget, with_start=seed == exp.arms[0].seed)
    return written


def evaluate_seed(exp: Experiment, seed: int, budget: float | None, with_start: bool) -> list[Path]:
    """The seed's arms on every benchmark not done yet (module docstring); services are opened once for all."""
    from coordinator.experiment.evaluate import open_eval_services

    arms = [a for a in exp.arms if a.seed == seed]
    todo = [b for b in exp.scored_benchmarks if not all(_done(exp, a, b, budget) for a in arms)]
    for b in exp.scored_benchmarks:
        if b not in todo:
            log.info("evaluation of seed %d on %s done before, not redone", seed, b)
    if not todo:
        return []
    services = open_eval_services(arms[0].cfg, league=True)
    try:
        return [p for b in todo for p in (_score_likelihood if is_likelihood(b) else _score_benchmark)(
            exp, services, seed, b, budget, with_start)]
    finally:
        services.close()


def ensure_overlap(exp: Experiment) -> None:
    """Which held-out templates share behaviour with the warm start or the seed (populora.evals.overlap), run once
    per experiment in a sandbox of its own and kept in OVERLAP_FILE: the comparison leaves their families out of the
    `heldout` headline. Nothing to do without `heldout` or when the file is there."""
    if HELDOUT not in exp.benchmarks or (exp.out_dir / OVERLAP_FILE).exists():
        return
    from dataclasses import asdict

    from coordinator.clients.services import build, remote
    from populora.evals.overlap import shared_behaviour

    cfg = exp.arms[0].cfg
    sandbox = (build if cfg.run.deployment == "embedded" else remote)("sandbox", cfg)
    try:
        overlap = shared_behaviour(sandbox)
    finally:
        sandbox.close()
    write_json(exp.out_dir / OVERLAP_FILE, {**asdict(overlap), "removed": overlap.removed})
    log.info("held-out templates sharing behaviour with the warm start or the seed: %s",
             {k: v for k, v in overlap.shared.items() if v} or "none")


def seed_versions(exp: Experiment, seed: int, budget: float | None, with_start: bool):
    """(chosen, owner, final, per_arm) of the seed's scoring: {label: EvalTarget} of every version scored, {label:
    the run id whose file holds it}, the labels scored at the last checkpoint (the warm start among them), and
    seed_targets' {run id: (targets, last labels)}."""
    from populora.evals import EvalTarget
    from populora.store import ArtifactStore

    arms = [a for a in exp.arms if a.seed == seed]
    store = ArtifactStore(arms[0].cfg.store_root)
    per_arm = seed_targets(exp, seed, budget)
    owner: dict[str, str] = {}  # label -> run id whose file holds it
    chosen: dict[str, EvalTarget] = {}
    for run_id, (targets, _) in per_arm.items():
        for name in targets:
            adapter_id, _, version = name.rpartition("@v")
            ref = store.ref(adapter_id, int(version))
            chosen[name], owner[name] = EvalTarget(name, adapter_id, ref.version, str(store.path_of(ref))), run_id
    warm = f"{arms[0].run_id}.warm"
    if with_start and store.versions(warm):
        ref = store.latest(warm)
        chosen[WARM], owner[WARM] = EvalTarget(WARM, warm, ref.version, str(store.path_of(ref))), arms[0].run_id
    final = {n for _, last in per_arm.values() for n in last} | ({WARM} if WARM in chosen else set())
    return chosen, owner, final, per_arm


def _score_likelihood(exp: Experiment, services, seed: int, name: str, budget: float | None,
                      with_start: bool) -> list[Path]:
    """The likelihood score of one benchmark (`<benchmark>-logprob`) for one seed: its parts made or read back,
    then one file per arm (coordinator/experiment/likelihoodeval.py)."""
    from coordinator.experiment.likelihoodeval import score_parts, write_files

    benchmark = measured(name)
    arms = [a for a in exp.arms if a.seed == seed]
    chosen, owner, final, per_arm = seed_versions(exp, seed, budget, with_start)
    log.info("likelihood of seed %d on %s: %d versions, %d of them at the last checkpoint", seed, benchmark,
             len(chosen), len(final))
    parts = parts_of(load_benchmark(exp, benchmark, "likelihood"), exp.cfg.eval.curve_limit)
    trained = {a.run_id: arm_state(a) for a in arms}
    start = time.perf_counter()
    made = score_parts(exp, services, seed, name, parts, chosen, final, budget, trained)
    return write_files(exp, arms, name, made, chosen, owner, per_arm, budget, trained, time.perf_counter() - start)


def _score_benchmark(exp: Experiment, services, seed: int, benchmark: str, budget: float | None,
                     with_start: bool) -> list[Path]:
    """One benchmark for one seed: its parts (made or read back), then one file per arm."""
    from populora.evals import evaluate
    from populora.evals.progress import progress_text

    arms = [a for a in exp.arms if a.seed == seed]
    cfg, settings = arms[0].cfg, eval_settings(exp)
    chosen, owner, final, per_arm = seed_versions(exp, seed, budget, with_start)
    log.info("evaluating seed %d on %s: %d versions, %d of them at the last checkpoint", seed, benchmark, len(chosen),
             len(final))
    problems = load_benchmark(exp, benchmark)
    parts = parts_of(problems, exp.cfg.eval.curve_limit)
    trained = {a.run_id: arm_state(a) for a in arms}
    made, start = [], time.perf_counter()
    for k, (chunk, curve) in enumerate(parts):
        names = [n for n in chosen if curve or n in final]
        key = {"benchmark": benchmark, "settings": settings, "budget": budget, "trained": trained, "targets": names,
               "problems": [p.id for p in chunk]}
        path = exp.out_dir / "evalparts" / f"s{seed}.{benchmark}.{k:03d}.json"
        if path.exists() and json.loads(path.read_text()).get("key") == key:
            made.append(json.loads(path.read_text()))
            continue
        log.info("evaluating seed %d on %s: part %d/%d, %d problems, %d versions", seed, benchmark, k + 1, len(parts),
                 len(chunk), len(names))
        tokens: list[int] = []

        def progress(event: str, info: dict, part: int = k, seen: list[int] = tokens) -> None:
            if line := progress_text(event, info):
                log.info("evaluating seed %d on %s, part %d/%d: %s", seed, benchmark, part + 1, len(parts), line)
            elif event == "generated":
                seen.append(info.get("tokens", 0))

        results = evaluate(services, [chosen[n] for n in names], benchmark, samples=exp.samples,
                           temperature=settings["temperature"], seed=settings["seed"],
                           max_new_tokens=settings["max_new_tokens"], chat=cfg.model.chat_template,
                           code_f_inputs=cfg.tasks.code_f_inputs, timeout_s=cfg.eval.timeout_s, problems=chunk,
                           cache=_expected_cache(cfg), progress=progress)
        part = {"key": key, "generated_tokens": sum(tokens), "results": [r.to_json() for r in results]}
        write_json(path, part)
        made.append(part)
    return _write_arm_files(exp, arms, benchmark, made, chosen, owner, per_arm, budget, trained,
                            time.perf_counter() - start, services)


def _expected_cache(cfg):
    from coordinator.run.phases.evaluate import expected_cache

    return expected_cache(cfg)


def _write_arm_files(exp: Experiment, arms: list[Arm], benchmark: str, parts: list[dict], chosen: dict,
                     owner: dict[str, str], per_arm: dict, budget: float | None, trained: dict, seconds: float,
                     services) -> list[Path]:
    """Each arm's file from the parts: its versions' per-problem results joined and scored again (pass@k over all
    their problems), the tokens of each part charged to the arms by their share of its versions (2N a token, off the
    budget: spec 14), the members' scores recorded in the arm's league as `populora eval --run` records them."""
    from coordinator.run.phases.evaluate import record, scores_of
    from populora.evals.harness import EvalResult, score
    from populora.rpc import ServiceError
    from populora.store import ArtifactStore

    problems: dict[str, list] = {n: [] for n in chosen}
    apart: dict[str, list] = {n: [] for n in chosen}
    protocol: dict[str, str] = {}
    tokens = dict.fromkeys(per_arm, 0.0)
    for part in parts:
        labels = part["key"]["targets"]
        for r in map(EvalResult.from_json, part["results"]):
            problems[r.label] += r.problems
            apart[r.label] += [a for a in r.set_apart if a not in apart[r.label]]
            protocol[r.label] = r.protocol
        for name in labels:
            tokens[owner[name]] += part["generated_tokens"] / len(labels)
    cfg = arms[0].cfg
    size, store = model_size(cfg), ArtifactStore(cfg.store_root)
    written = []
    for arm in arms:
        targets, _ = per_arm[arm.run_id]
        names = [nm for nm in chosen if owner[nm] == arm.run_id]
        # the arm's versions answer the same problems: their tokens are charged at the mean of their N (spec 9,
        # "Mixed ranks": each member's own rank)
        sizes = [size.with_rank(store.rank(chosen[nm].adapter_id)) for nm in names] if len(cfg.ranks) > 1 else []
        n = sum(sizes) // len(sizes) if sizes else size.with_adapter
        results = [score(arm.run_id, chosen[nm], benchmark, problems[nm], exp.samples, protocol.get(nm, "training"),
                         apart[nm]) for nm in names]
        members = [r for r in results if r.label != WARM]
        try:
            record(services.league, arm.run_id, benchmark, scores_of(members),
                   {nm.rpartition("@v")[0]: step for nm, step in targets.items()})
        except ServiceError as e:  # a member retired since its checkpoint is no longer in the league
            log.warning("scores of %s on %s not recorded in the league: %s", arm.run_id, benchmark, e.message)
        n_problems = max((r.n_problems for r in results), default=0)
        body = {"benchmark": benchmark, "limit": eval_limit(exp, benchmark) or n_problems, "samples": exp.samples,
                "settings": eval_settings(exp), "targets": targets, "generated_tokens": round(tokens[arm.run_id]),
                "flops": FORWARD_FLOPS_PER_PARAM * n * round(tokens[arm.run_id]), "parts": len(parts),
                "results": [r.to_json() for r in results], "trained": trained[arm.run_id], "budget": budget,
                "seconds": seconds}
        path = eval_path(exp.out_dir, arm.run_id, benchmark)
        write_json(path, body)
        written.append(path)
    return written
