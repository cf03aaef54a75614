"""What an experiment is (spec 1, 13, 14): its arms (the population and the AZR baseline, one run each per seed, from
the same warm start, config and compute budget; `--arms` adds `mixed-rank`, the population with members of several
ranks, spec 9), its id, and the manifest that lets the same command continue it and refuses another config under the
same id.

An experiment has an id; each arm is a run of its own whose id is derived from it (`<id>-population-s<seed>`,
`<id>-mixed-rank-s<seed>`, `<id>-baseline-s<seed>`). Layout under <run.output_dir>/<id>/: experiment.json (what was
asked: config, seeds, budget, benchmarks, arms), evals/<run>.<benchmark>.json (one arm's scores on one benchmark, as
`populora eval` writes them), scores.json (the comparison's numbers), report.html and its PNG figures.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.experiment.comparison import ArmRun, ComparisonInput
from coordinator.experiment.headline import HELDOUT, LOGPROB
from coordinator.record.stepmetrics import read_metrics
from coordinator.train import as_baseline
from populora.config import Config, ConfigError, config_from_yaml
from populora.evals import BENCHMARKS
from populora.names import MAX_RUN_ID, reason

ARMS = ("population", "mixed-rank", "baseline")
DEFAULT_ARMS = ("population", "baseline")
__all__ = ["ARMS", "DEFAULT_ARMS", "HELDOUT", "LIMITS", "Arm", "Experiment", "arm_config", "check_manifest",
           "default_id", "parse_arms", "parse_seeds", "plan"]


@dataclass(frozen=True)
class Arm:
    """One run of the experiment: the population, the mixed-rank population or the baseline, with one run seed."""

    name: str
    seed: int
    run_id: str
    cfg: Config


@dataclass
class Experiment:
    """What `populora experiment` was asked for; `arms` in the order they run (per seed: population, baseline)."""

    experiment_id: str
    cfg: Config
    seeds: list[int]
    benchmarks: list[str]
    limit: int | None = None
    samples: int = 1
    arms: list[Arm] = field(default_factory=list)
    directory: Path | None = None  # where its files go, when not <run.output_dir>/<id> (a shard's own)
    problem_sets: dict | None = None  # the fixed subsets it scores (coordinator/experiment/problemsets.py)

    @property
    def out_dir(self) -> Path:
        return self.directory or Path(self.cfg.run.output_dir) / self.experiment_id

    @property
    def scored_benchmarks(self) -> list[str]:
        """The benchmarks as the comparison reports them: each benchmark's pass@1, then the likelihood score of
        each one the problem sets give a likelihood subset (`<benchmark>-logprob`)."""
        sets = (self.problem_sets or {}).get("benchmarks", {})
        return list(self.benchmarks) + [b + LOGPROB for b in self.benchmarks if sets.get(b, {}).get("likelihood")]

    def manifest(self) -> dict:
        return {"experiment_id": self.experiment_id, "config_yaml": self.cfg.to_yaml(), "seeds": self.seeds,
                "budget_flops": self.cfg.run.budget_flops, "budget_tokens": self.cfg.run.budget_tokens, "budget_sandbox_jobs": self.cfg.run.budget_sandbox_jobs,
                "max_steps": self.cfg.run.steps, "arms": [{"arm": a.name, "seed": a.seed, "run_id": a.run_id}
                                                          for a in self.arms]}

    def comparison_input(self) -> ComparisonInput:
        """What the comparison reads of the experiment: its arms' runs, benchmarks, evaluation settings and config."""
        return ComparisonInput(self.experiment_id, self.out_dir, self.cfg, list(self.seeds), self.scored_benchmarks,
                               self.limit, self.samples,
                               [ArmRun(a.name, a.seed, a.run_id, Path(a.cfg.run.output_dir) / a.run_id)
                                for a in self.arms])


def parse_seeds(text: str | None, default: int) -> list[int]:
    """`1,2` -> [1, 2]; none given -> [run.seed]."""
    if not text:
        return [default]
    seeds = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            seeds.append(int(part))
        except ValueError:
            raise ConfigError(f"--seeds {text!r}: '{part}' is not an integer (e.g. --seeds 1,2)") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r}: give one or more distinct integers (e.g. --seeds 1,2)")
    return seeds


def parse_arms(text: str | None) -> list[str]:
    """`population,mixed-rank,baseline` -> the arms in that order; none given -> population and baseline."""
    if not text:
        return list(DEFAULT_ARMS)
    arms = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms or len(set(arms)) != len(arms):
        raise ConfigError(f"--arms {text!r}: give distinct arms of {', '.join(ARMS)} (e.g. --arms "
                          "population,mixed-rank,baseline)")
    return arms


def default_id(cfg: Config, label: str, seeds: list[int], arms: list[str] | None = None) -> str:
    """The same configuration, seeds, budget and arms give the same id, so rerunning the same command continues it
    (the default arms leave the id as it was before arms could be chosen)."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", label or cfg.model.name.split("/")[-1])[:32].strip("-_") or "exp"
    chosen = "" if not arms or tuple(arms) == DEFAULT_ARMS else json.dumps(arms)
    digest = hashlib.sha256((_training_yaml(cfg) + json.dumps(seeds) + chosen).encode()).hexdigest()[:8]
    return f"{stem}-exp-{digest}"


def _one_rank(cfg: Config) -> None:
    """Every member at lora.rank: no per-role ranks, no rank R1 could move to, R1 out of the mix."""
    cfg.lora.teacher_ranks, cfg.lora.student_ranks, cfg.evolution.ranks = [], [], []
    cfg.evolution.operator_mix = {k: v for k, v in cfg.evolution.operator_mix.items() if k != "R1"}


def arm_config(cfg: Config, arm: str, seed: int, run_id: str, arms: tuple[str, ...] | list[str] = DEFAULT_ARMS
               ) -> Config:
    """One arm's run config: the experiment's, with its run seed and id; the baseline as `train --mode baseline`
    makes it (spec 1: one adapter in both roles, AZR's learnability reward). The warm start is the same section in
    every arm, so all start from the identical cached adapter (spec 13). Beside a `mixed-rank` arm (in `arms`),
    `population` is the uniform one, every member at lora.rank, and `mixed-rank` the same population with its members
    at the ranks of lora.mixed_ranks() (members of another rank than lora.rank start from the warm start brought to
    it)."""
    out = Config.model_validate(cfg.model_dump())
    out.run.seed, out.run.run_id = seed, run_id
    if arm == "baseline":
        as_baseline(out)
        if out.lora.teacher_ranks or out.lora.student_ranks or out.evolution.ranks:
            _one_rank(out)  # the baseline's one adapter has lora.rank: inference needs no wider slots
    else:
        out.run.mode = "population"
        if arm == "mixed-rank":
            out.lora.teacher_ranks, out.lora.student_ranks = cfg.lora.mixed_ranks()
        elif "mixed-rank" in arms:
            _one_rank(out)
    return Config.model_validate(out.model_dump())


def plan(cfg: Config, experiment_id: str, seeds: list[int], benchmarks: list[str], limit: int | None = None,
         samples: int = 1, arms: list[str] | None = None) -> Experiment:
    """The experiment's arms (per seed, in the order of `arms`: population and baseline unless told). Compute-matched
    (spec 14) means a budget: without one the arms would run equal steps."""
    arms = list(arms or DEFAULT_ARMS)
    if not (cfg.run.budget_flops or cfg.run.budget_tokens or cfg.run.budget_sandbox_jobs):
        raise ConfigError("an experiment compares the arms at equal compute (spec 14): give a budget, e.g. "
                          "--budget flops=2e15 (or set run.budget_flops)")
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,90}", experiment_id):
        raise ConfigError(f"--id {experiment_id!r}: use 1-90 letters, digits, '-' or '_'")
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit {limit}: must be at least 1")
    if samples < 1:
        raise ConfigError(f"--samples {samples}: must be at least 1")
    if samples > 1 and cfg.eval.temperature == 0:
        raise ConfigError(f"--samples {samples} with eval.temperature 0 would score the same greedy answer "
                          f"{samples} times: set --set eval.temperature=0.8 for pass@k")
    benchmarks = list(cfg.eval.benchmarks) + list(benchmarks)  # the config's published benchmarks, then --benchmark
    for name in benchmarks:
        if name not in BENCHMARKS:
            raise ConfigError(f"--benchmark {name!r}: unknown (a --benchmark or an eval.benchmarks entry); allowed: "
                              f"{', '.join(BENCHMARKS)}")
    base = Config.model_validate(cfg.model_dump())
    base.run.mode, base.run.run_id = "population", ""
    names = [HELDOUT] + [b for b in benchmarks if b != HELDOUT]
    exp = Experiment(experiment_id, base, seeds, list(dict.fromkeys(names)), limit, samples)
    for seed in seeds:
        for arm in arms:
            run_id = f"{experiment_id}-{arm}-s{seed}"
            if why := reason(run_id, MAX_RUN_ID):  # checked before any arm's run is created
                raise ConfigError(f"--id {experiment_id!r}, seed {seed}: the arm's run id {run_id!r} is refused: "
                                  f"{why}; choose another --id")
            exp.arms.append(Arm(arm, seed, run_id, arm_config(base, arm, seed, run_id, arms)))
    return exp


LIMITS = ("budget_flops", "budget_tokens", "budget_sandbox_jobs", "max_steps")


def _training_yaml(cfg: Config, limits: bool = True) -> str:
    """The config as far as it decides what the arms train: without the `eval` section, which only says how they are
    scored (an evaluation file records its own settings, and one made with others is redone); `limits=False` also
    without the step cap and the budgets."""
    tree = cfg.model_dump(mode="json")
    tree.pop("eval", None)
    if not limits:
        for key in ("steps", "budget_flops", "budget_tokens", "budget_sandbox_jobs"):
            tree["run"].pop(key)
    return json.dumps(tree, sort_keys=True)


def _reach(limit: int) -> float:
    return float("inf") if limit == 0 else limit  # 0: no budget


def _spent(exp: Experiment) -> dict[str, float]:
    """The most any arm has spent so far of each limit (LIMITS), from the arms' metrics."""
    out = dict.fromkeys(LIMITS, 0.0)
    for arm in exp.arms:
        rows = read_metrics(Path(arm.cfg.run.output_dir) / arm.run_id)
        if not rows:
            continue
        c = rows[-1].get("compute_cumulative", {})
        for key, value in (("budget_flops", c.get("budget_flops", 0)), ("budget_tokens", c.get("tokens", 0)),
                           ("budget_sandbox_jobs", c.get("sandbox_jobs", 0)), ("max_steps", rows[-1]["step"])):
            out[key] = max(out[key], float(value))
    return out


def check_manifest(exp: Experiment) -> bool:
    """True if the experiment was started before. The same id is refused, and nothing is changed, for another config,
    other seeds, or a smaller budget or step cap than an arm has already spent (a smaller one that no arm has reached
    yet ends every arm there, as if the experiment had been started with it); a larger one continues the arms
    further (as `train --resume` does)."""
    path = exp.out_dir / "experiment.json"
    if not path.exists():
        return False
    stored = json.loads(path.read_text())
    # read through today's schema, so a field added since (with its default) is no difference
    stored["config_yaml"] = _training_yaml(config_from_yaml(stored["config_yaml"], f"the stored config of {path}"),
                                           limits=False)
    mine = exp.manifest()
    mine["config_yaml"] = _training_yaml(exp.cfg, limits=False)
    differs = [k for k in ("config_yaml", "seeds", "arms") if stored.get(k) != mine[k]]
    spent = _spent(exp)
    shrinks = [k for k in LIMITS if _reach(mine[k]) < _reach(stored.get(k, 0)) and spent[k] >= _reach(mine[k])]
    if differs or shrinks:
        what = ", ".join(differs + [f"larger {k} ({stored.get(k)}, now {mine[k]}; an arm has spent {spent[k]:.6g})"
                                    for k in shrinks])
        raise ConfigError(f"experiment '{exp.experiment_id}' was started with another {what} ({path}); rerun the "
                          "command it was started with (a budget or step cap may only grow, or shrink to what no "
                          "arm has reached yet), or pass a new --id")
    return True
