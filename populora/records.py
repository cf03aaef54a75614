"""The typed records of a training step (what each phase returns, what the journal stores) and their one JSON codec.

A step's data flows match -> propose -> validate -> solve -> check -> rate -> update -> evolve as these dataclasses;
they are converted to JSON only when the journal persists them and back when it loads them. Every record decodes
the JSON layout runs have stored since the first release, so stored runs stay readable. The league's dashboard
reads the same records from the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from populora.codec import CodecError, from_json, to_json  # noqa: F401  (the records' codec, imported from here)
from populora.tasks.buffers import BufferSet
from populora.tasks.triplet import Triplet


def overlap_field(factory: Any = None, default: Any = 0) -> Any:
    """A field that only overlapped steps (spec 16, loop.max_staleness >= 1) fill: left out of the stored JSON while
    it holds its default, so a lock-step run stores exactly the records it stored before the field existed."""
    meta = {"omit_default": True}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


# ------------------------------------------------------------------------------------------------ population
@dataclass(frozen=True)
class Member:
    """One active adapter of the population: its role and the version it plays with."""

    role: str
    version: int


Population = dict[str, Member]  # adapter id -> member


# ------------------------------------------------------------------------------------------------ one step
@dataclass(frozen=True)
class Pairing:
    """One match of spec 6-7: a teacher, the student PFSP drew for it, one task type, at one step."""

    match_id: str
    teacher: str
    student: str
    task_type: str
    p_student: float = 0.0  # P(student beats teacher) when it was drawn


@dataclass(frozen=True)
class Matched:
    pairings: list[Pairing]


@dataclass(frozen=True)
class Proposal:
    """One teacher completion: the prompt slot it answers and the text and tokens it wrote."""

    id: str
    task_type: str
    teacher: str
    match_id: str
    version: int
    text: str
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    finish_reason: str = ""
    given_program: str = ""  # code_f: the program the teacher was given
    logprobs: list[float] = overlap_field(list)  # log mu_b of each response token, as inference sampled it
    # share of its tokens drawn from a top-p nucleus that left out probability mass (spec 16); 0 is not stored
    truncated_fraction: float = field(default=0.0, metadata={"omit_default": True})


@dataclass(frozen=True)
class Proposed:
    proposals: list[Proposal]


@dataclass(frozen=True)
class Verdict:
    """Spec 3: valid with its task (outputs computed by the verifier), or the reason of the first failed check."""

    valid: bool
    reason: str
    detail: str = ""
    task: Triplet | None = None


@dataclass(frozen=True)
class Validated:
    verdicts: dict[str, Verdict]  # proposal id -> verdict
    buffers: BufferSet  # the buffers after the valid tasks of this step entered them (spec 10)
    sandbox_jobs: int = 0  # program runs validation took (spec 14)
    sandbox_cpu_seconds: float = 0.0  # the CPU time those runs used (the kernel's count; beside FLOPs, spec 14)


@dataclass(frozen=True)
class Attempt:
    """One student sample for one valid task."""

    id: str
    task_id: str
    student: str
    match_id: str
    text: str
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    finish_reason: str = ""
    version: int = overlap_field()  # the student's behaviour version (0: the step's own version, lock-step)
    logprobs: list[float] = overlap_field(list)  # log mu_b of each response token, as inference sampled it
    truncated_fraction: float = field(default=0.0, metadata={"omit_default": True})  # as Proposal's


@dataclass(frozen=True)
class Solved:
    attempts: list[Attempt]


@dataclass(frozen=True)
class Checked:
    outcomes: dict[str, str]  # attempt id -> correct | wrong | malformed | verifier_error
    rho: dict[str, float | None]  # task id -> mean correctness of its attempts (spec 4)
    sandbox_jobs: int = 0  # program runs checking took (spec 14)
    sandbox_cpu_seconds: float = 0.0  # the CPU time those runs used


@dataclass(frozen=True)
class Rating:
    role: str
    mu: float
    sigma: float
    skill: float  # conservative skill mu - k sigma (spec 6)


@dataclass(frozen=True)
class Rated:
    applied: int  # the step's matches the league has applied (by this delivery of the phase or an earlier one)
    duplicates: int  # of those, how many an earlier delivery had applied (a killed worker's, taken over)
    reported: list[str]  # match ids reported this step
    ratings: dict[str, Rating]  # adapter id -> rating after the step's matches


@dataclass(frozen=True)
class Rollout:
    """One response to train on with its reward (spec 4), grouped by (task type, role) for TRR++ (spec 5)."""

    role: str
    task_type: str
    reward: float
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    version: int = 0  # the behaviour version b that generated it (spec 16); 0: the version it trains
    logprobs: list[float] = field(default_factory=list)  # log mu_b per response token (spec 16), when recorded
    truncated_fraction: float = 0.0  # share of its tokens drawn from a truncated top-p nucleus (spec 16)


@dataclass(frozen=True)
class UpdateStats:
    """What one adapter's TRR++ update did (spec 5; the trainer's UpdateStats message)."""

    loss: float = 0.0  # the on-policy loss of spec 5 in the first epoch (normalised by the response tokens)
    grad_norm: float = 0.0  # the gradient's norm before clipping, first epoch
    mean_abs_advantage: float = 0.0  # over the adapter's rollouts
    tokens: int = 0  # response tokens trained on
    seconds: float = 0.0  # of the whole update (shared by the adapters of one batched update)
    rollouts: int = 0
    truncated_fraction: float = field(default=0.0, metadata={"omit_default": True})  # spec 16, as Proposal's
    # spec 16, overlapped steps only: rollouts by staleness v - b, rollouts dropped for v - b > k, the mean of
    # |r - 1| over the tokens trained on and the fraction of them whose ratio the clip cut off
    staleness: dict[str, int] = overlap_field(dict)
    dropped: int = overlap_field()
    ratio_dev: float = overlap_field(default=0.0)
    clipped_fraction: float = overlap_field(default=0.0)


@dataclass(frozen=True)
class AdapterDigest:
    """A stored version's weights and optimizer state ("" for none), exactly (populora.store.tensors_digest)."""

    weights_digest: str
    optimizer_digest: str = ""


@dataclass(frozen=True)
class Updated:
    population: Population
    stats: dict[str, UpdateStats]
    mode: str = ""
    reused: list[str] = field(default_factory=list)  # adapters whose version a crashed earlier try had written
    served_ms: float = overlap_field(default=0.0)  # overlapped steps: the trainer's answer to every new version served
    digests: dict[str, AdapterDigest] = field(default_factory=dict)  # every member's version after the update


@dataclass(frozen=True)
class EvolutionEvent:
    step: int
    role: str
    retired: str
    child: str
    parents: list[str]
    operator: str
    relative_change: float
    effective_rank: float
    # A run of several ranks (spec 9, "Mixed ranks") records the child's and its parents' ranks; a run of one rank
    # leaves them out, so its records are what they were.
    rank: int = field(default=0, metadata={"omit_default": True})
    parent_ranks: list[int] = field(default_factory=list, metadata={"omit_default": True})


@dataclass(frozen=True)
class Evolved:
    population: Population
    events: list[EvolutionEvent]
    digests: dict[str, AdapterDigest] = field(default_factory=dict)  # every member's version after evolution


# ------------------------------------------------------------------------------------------------ evaluation
@dataclass(frozen=True)
class ProblemScore:
    """One benchmark problem: samples that passed out of n, and the first failing sample's error line."""

    id: str
    passed: int
    n: int
    error: str = ""


@dataclass(frozen=True)
class EvalScore:
    """One adapter version's score on the phase's benchmark ("" = the bare base model): docs/eval.md."""

    adapter_id: str
    version: int
    label: str
    pass_at_1: float
    pass_at_k: dict[str, float]  # k (as text: a JSON key) -> unbiased pass@k
    n_problems: int
    samples: int
    problems: list[ProblemScore] = field(default_factory=list)


@dataclass(frozen=True)
class Evaluated:
    """The `eval` phase (every eval.every steps): the population's scores on one held-out benchmark, and what the
    evaluation spent (not counted in the run's training compute)."""

    benchmark: str
    scores: list[EvalScore]
    generated_tokens: int = 0
    sandbox_jobs: int = 0
    seconds: float = 0.0


# ------------------------------------------------------------------------------------------------ step 0
@dataclass(frozen=True)
class WarmStarted:
    """The warm start of spec 13: the adapter every member starts from and the fit that made it; `adapter_id` is ""
    when the run has none (warmstart.enabled off: members start at B = 0 and the bare base model seeds)."""

    adapter_id: str = ""
    version: int = 0
    cached: bool = False  # taken from the cache: this run ran no fit step
    losses: list[float] = field(default_factory=list)  # mean loss per response token, per step of the fit
    tokens: int = 0  # tokens (prompt + response) the fit trained on
    fit_seconds: float = 0.0
    examples: int = 0
    digest: str = ""  # the cache key: base model, examples and hyperparameters
    seconds: float = 0.0


@dataclass(frozen=True)
class Initialized:
    population: Population


@dataclass(frozen=True)
class Seeded:
    buffers: BufferSet
    rounds: int
    proposals: int
    reasons: dict[str, int]
    sizes: dict[str, int]
    generated_tokens: int = 0  # by the bare base model (spec 14)
    sandbox_jobs: int = 0
    sandbox_cpu_seconds: float = 0.0


# ------------------------------------------------------------------------------------------------ compute
@dataclass(frozen=True)
class Usage:
    """Compute (spec 14): tokens generated, tokens trained on (prompt and response of the rows an update used: rows
    of zero advantage cost no pass and are not charged; times the update's epochs), sandbox jobs (program runs),
    prompt tokens passed forward before generation, and the FLOPs of all of it (2N per prompt or generated token,
    6N per trained token, N = base parameters + the adapter's)."""

    generated_tokens: int = 0
    trained_tokens: int = 0
    sandbox_jobs: int = 0
    prompt_tokens: int = 0
    flops: int = 0

    @property
    def tokens(self) -> int:
        """Generated + trained tokens: what `run.budget_tokens` counts (the prompt pass is in `flops`)."""
        return self.generated_tokens + self.trained_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.generated_tokens + other.generated_tokens, self.trained_tokens + other.trained_tokens,
                     self.sandbox_jobs + other.sandbox_jobs, self.prompt_tokens + other.prompt_tokens,
                     self.flops + other.flops)


@dataclass(frozen=True)
class Accounted:
    """What one step spent: per adapter ("base": the bare base model, while seeding), per phase and in total. Sandbox
    jobs are counted per step only (one job may serve a teacher and a student)."""

    adapters: dict[str, Usage]
    total: Usage
    # per phase of spec 14 ("propose", "solve", "update"; step 0: "warm_start", "seeding"); sandbox jobs in total only
    phases: dict[str, Usage] = field(default_factory=dict)
    sandbox_cpu_seconds: float = 0.0  # CPU time of the step's sandbox jobs, reported beside FLOPs (spec 14)


# What each phase of the journal stores (coordinator.run.step runs them; spec sections in its comments).
PHASE_RECORDS: dict[str, type] = {
    "warmstart": WarmStarted, "init": Initialized, "seed": Seeded,
    "match": Matched, "propose": Proposed, "validate": Validated, "solve": Solved, "check": Checked,
    "rate": Rated, "update": Updated, "evolve": Evolved, "account": Accounted, "eval": Evaluated,
}
