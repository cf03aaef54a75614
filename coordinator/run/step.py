"""One training step of PopuLoRA, top to bottom: the map of the system.

Each line is one phase of docs/algorithm.md, run through the journal (`j.once`), which stores the phase's typed
result before the next line runs; a resumed run reads what is stored instead of running it again, and in
distributed mode the journal hands each phase to a worker. The phases themselves are in coordinator.run.phases.

A step is its games (`play_step`: match to rate) then its update (`finish_step`: update, evolve, account, eval),
so that with loop.max_staleness >= 1 coordinator.run.pipeline can run the games of one step beside the update of the
one before (spec 16); `train_step` runs both, as lock-step does and as a worker replaying a step does.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from coordinator.run.journal import Journal
from coordinator.run.phases import (
    Run,
    account,
    check,
    evolve,
    init,
    match,
    propose,
    rate,
    rollouts,
    seed,
    seed_usage,
    solve,
    update,
    usage,
    validate,
)
from coordinator.run.phases.evaluate import eval_phase
from coordinator.run.phases.warmstart import warm_start
from populora.records import (
    Accounted,
    Checked,
    Evaluated,
    Evolved,
    Initialized,
    Matched,
    Population,
    Proposed,
    Rated,
    Seeded,
    Solved,
    Updated,
    Validated,
    WarmStarted,
)
from populora.tasks import BufferSet


@dataclass(frozen=True)
class Prepared:
    """Step 0: the warm start, the population as created and the buffers its starting policy filled."""

    warmed: WarmStarted
    initialized: Initialized
    seeded: Seeded
    spent: Accounted
    evaluated: Evaluated | None = None


def prepare(j: Journal, run: Run) -> Prepared:
    """Step 0: the warm start, then create and register the adapters, then fill the task buffers."""
    warmed = j.once(0, "warmstart", warm_start, run)                                        # 13  format warm-up
    initialized = j.once(0, "init", init, run, warmed)                                      # 1   the members
    seeded = j.once(0, "seed", seed, run, warmed)                                           # 10  fill the buffers
    spent = j.once(0, "account", account, run, 0, seed_usage(warmed, seeded, run.size))     # 14  compute spent
    evaluated = None
    if run.evaluates(0):
        evaluated = j.once(0, "eval", eval_phase, run, 0, initialized.population)           #     held-out scores
    return Prepared(warmed, initialized, seeded, spent, evaluated)


@dataclass(frozen=True)
class Played:
    """The games of step t (spec 2-7), as stored: what its update trains on."""

    matched: Matched
    proposed: Proposed
    validated: Validated
    solved: Solved
    checked: Checked
    rated: Rated


@dataclass(frozen=True)
class StepRecord(Played):
    """Everything one step produced, as stored: its games, then their update, evolution and accounting."""

    step: int
    updated: Updated
    evolved: Evolved | None
    spent: Accounted
    evaluated: Evaluated | None = None

    @property
    def population(self) -> Population:
        """The members playing the next step."""
        return (self.evolved or self.updated).population


def train_step(j: Journal, run: Run, t: int) -> StepRecord:
    """Step t >= 1: spec sections 2-9 in order."""
    return finish_step(j, run, t, play_step(j, run, t))


def play_step(j: Journal, run: Run, t: int) -> Played:
    """The games of step t, played by the versions of step `behaviour_step(run, t)` (spec 16; lock-step: t-1)."""
    population, buffers = games_state(j, run, t)
    matched = j.once(t, "match", match, run, t)                                             # 7   PFSP pairings
    proposed = j.once(t, "propose", propose, run, t, matched, population, buffers)          # 2,10 teachers, 1 batch
    validated = j.once(t, "validate", validate, run, proposed, buffers)                     # 3   sandbox; buffers
    solved = j.once(t, "solve", solve, run, t, matched, proposed, validated, population)    # 2   students, 1 batch
    checked = j.once(t, "check", check, run, solved, validated)                             # 2,4 correctness, rho
    rated = j.once(t, "rate", rate, run, t, matched, proposed, checked)                     # 6   TrueSkill
    return Played(matched, proposed, validated, solved, checked, rated)


def finish_step(j: Journal, run: Run, t: int, played: Played) -> StepRecord:
    """The update of step t, trained on its games, from the versions step t-1 left; then evolution and accounting."""
    population = state_before(j, t)[0]
    proposed, validated, solved, checked = played.proposed, played.validated, played.solved, played.checked
    batch = rollouts(run.cfg.rewards, proposed, validated, solved, checked)                 # 4   rewards
    updated = j.once(t, "update", update, run, t, population, batch)                        # 5,16 TRR++ per adapter
    evolved = None
    if run.evolves(t):
        evolved = j.once(t, "evolve", evolve, run, t, updated.population)                   # 8,9 replace the worst
    spent = usage(proposed, validated, solved, checked, batch, updated, run.cfg, run.size,  # 14  compute spent
                  run.ranks())
    spent = j.once(t, "account", account, run, t, spent)
    evaluated = None
    if run.evaluates(t):
        evaluated = j.once(t, "eval", eval_phase, run, t, (evolved or updated).population)  #     held-out scores
    return StepRecord(**{f.name: getattr(played, f.name) for f in fields(Played)},
                      step=t, updated=updated, evolved=evolved, spent=spent, evaluated=evaluated)


def behaviour_step(run: Run, t: int) -> int:
    """The step whose versions play the games of step t: t-1-k with loop.max_staleness = k (lock-step: t-1), but
    never before a step that evolved, since evolution is a barrier (spec 16): its children play the next games."""
    b = max(0, t - 1 - run.cfg.loop.max_staleness)
    return next((s for s in range(t - 1, b, -1) if run.evolves(s)), b)


def population_after(j: Journal, s: int) -> Population:
    """The population step s left (step 0: the members as created)."""
    if s == 0:
        return j.get(0, "init").population
    last: Updated | Evolved = j.get(s, "evolve") or j.get(s, "update")
    return last.population


def games_state(j: Journal, run: Run, t: int) -> tuple[Population, BufferSet]:
    """The population that plays step t's games and the buffers they draw from (what step t-1's games left)."""
    buffers = j.get(0, "seed").buffers if t == 1 else j.get(t - 1, "validate").buffers
    return population_after(j, behaviour_step(run, t)), buffers


def state_before(j: Journal, t: int) -> tuple[Population, BufferSet]:
    """The population and buffers step t starts from: what step t-1 (or step 0) left."""
    if t == 1:
        return j.get(0, "init").population, j.get(0, "seed").buffers
    return population_after(j, t - 1), j.get(t - 1, "validate").buffers
