"""The JSON of the dashboard's run views, as pydantic models (OpenAPI documentation): the overview, each step's
metrics, the problem explorer and an adapter's page and samples."""

from __future__ import annotations

from pydantic import Field

from services.league.rest_validation import Model, Role


class TaskTypeStats(Model):
    proposals: int
    valid: int
    valid_rate: float | None
    rejections: dict[str, int]
    solve_rate: float | None
    ast_depth: float | None
    cyclomatic: float | None
    lines_of_code: float | None


class JournalEvent(Model):
    step: int | None = None
    role: str
    retired: str
    child: str
    parents: list[str]
    operator: str
    relative_change: float | None
    epsilon: float | None = None


class SeedInfo(Model):
    sizes: dict[str, int]
    reasons: dict[str, int]
    rounds: int | None
    proposals: int | None


class TimelineSpan(Model):
    step: int
    phase: str
    service: str = Field(description="the service the phase kept busy (inference, sandbox, league, trainer, ...)")
    start: float = Field(description="unix seconds")
    end: float


class StepStaleness(Model):
    histogram: dict[str, int] = Field(description="rollouts by staleness v - b (spec 16)")
    max: int
    dropped: int
    ratio_dev: float | None = Field(description="mean |r - 1| over the adapters updated")
    clipped_fraction: float | None
    truncated_fraction: float | None = Field(None, description="share of the tokens drawn from a top-p nucleus that "
                                             "left out some probability mass (the policy has no nucleus)")
    update_to_served_ms: float


class WeightDiversity(Model):
    cosine: float | None = Field(description="mean pairwise cosine of the members' weight updates (spec 11)")
    distance: float | None = Field(description="mean pairwise relative Frobenius distance of the updates")


class StepDynamics(Model):
    solve_rates: dict[str, float | None] = Field(description="each student's mean solve rate at the step")
    complexity: dict[str, float | None] = Field(description="mean complexity of the step's valid proposals (spec 11)")
    weight_diversity: WeightDiversity | None = Field(description="after the step; population runs only")


class PhaseEfficiency(Model):
    threads: int = Field(description="torch threads the phase ran on (-1 settings counted as every core it may use)")
    flops: float = Field(description="FLOPs charged to the phase (spec 14: 2N, 6N a token; the budget)")
    useful_flops: float | None = Field(None, description="the products the work needs, counted from the model's "
                                       "shapes (spec 14, revised)")
    recomputed_flops: float | None = Field(None, description="products run again (activation checkpointing, the "
                                           "chunked head): executed, not useful")
    seconds: float
    gflops_per_s: float | None = Field(description="useful FLOPs per second")
    mfu: float | None = Field(description="useful FLOPs per second over the measured compute peak of their "
                              "precision on its threads")
    least_seconds: float = Field(description="the least time the roofline allows the phase's work")
    roofline_fraction: float | None = Field(description="least_seconds / seconds")


class PeakFigures(Model):
    gflops: float = Field(description="the best measured GFLOP/s of the model's products on these threads, in the "
                          "precision the base's products run in")
    bandwidth_gb_s: float = Field(description="the best measured read bandwidth")
    gflops_by_dtype: dict[str, float] | None = Field(None, description="the same for every precision measured")


class StepEfficiency(Model):
    dtype: str = Field(description="the dtype the base model's products run in (model.base_matmul)")
    peaks: dict[str, PeakFigures] = Field(description="per thread count")
    phases: dict[str, PhaseEfficiency] = Field(description="propose, solve, update")
    step: PhaseEfficiency = Field(description="the step's phases together over its seconds (its window when "
                                  "overlapped)")


class StepSummary(Model):
    step: int
    phases: list[str]
    seconds: dict[str, float]
    step_seconds: float
    finished_at: float | None
    seed: SeedInfo | None = None
    proposals: int | None = None
    valid: int | None = None
    valid_rate: float | None = None
    rejections: dict[str, int] | None = None
    task_types: dict[str, TaskTypeStats] | None = None
    solve_rate: float | None = None
    outcomes: dict[str, int] | None = None
    matches: int | None = None
    compute: dict[str, float] | None = None
    evolution: list[JournalEvent] | None = None
    timeline: list[TimelineSpan] | None = Field(None, description="the step's phases, each with its service")
    window_s: float | None = Field(None, description="from the previous step's end to this one's")
    idle_fraction: dict[str, float | None] | None = Field(None, description="trainer and inference, in the window")
    staleness: StepStaleness | None = Field(None, description="overlapped steps (loop.max_staleness >= 1)")
    dynamics: StepDynamics | None = Field(None, description="the step's figures for /v1/runs/{run}/dynamics")
    efficiency: StepEfficiency | None = Field(None, description="each phase against the machine's measured peak "
                                              "(embedded runs; coordinator/record/efficiency.py)")


class PhaseAt(Model):
    step: int
    phase: str
    finished_at: float | None = None


class Progress(Model):
    done: PhaseAt | None = Field(description="the last phase persisted")
    in_progress: PhaseAt | None = Field(description="the phase running now (null unless the run is running)")


class PhaseError(Model):
    step: int
    phase: str
    error: str


class LeagueCounts(Model):
    adapters: int
    active: int
    last_match_seq: int
    evals: int = Field(description="held-out scores recorded for the run")
    evals_recorded_at: float = Field(description="when the latest of them was recorded (unix seconds; 0: none)")


class Overview(Model):
    run_id: str
    revision: str = Field(description="changes whenever anything on the dashboard would")
    server_time: float
    journal: bool = Field(description="whether the coordinator recorded the run's phases (RecordPhases)")
    status: str
    mode: str
    steps_planned: int | None
    created_at: float | None
    updated_at: float | None
    progress: Progress
    error: PhaseError | None
    latest_step: StepSummary | None
    last_measured_step: StepSummary | None = Field(description="the latest step with proposals")
    compute: dict[str, float] = Field(description="generated and trained tokens and sandbox jobs so far (spec 14)")
    evolution: list[JournalEvent]
    journal_rows: int = Field(description="phases the coordinator recorded")
    league: LeagueCounts


class StepCoverageOut(Model):
    step: int
    proposals: int = Field(description="valid proposals at the step")
    unparsed: int = Field(description="of which did not parse")
    distinct_shapes: int = Field(description="distinct program shapes (normalised AST hashes) proposed so far")
    node_types: int = Field(description="AST node types used so far")
    new_shapes: int = Field(description="shapes first proposed at the step")
    new_shape_rate: float | None


class WeightDiversityAt(WeightDiversity):
    step: int
    flops: float


class Dynamics(Model):
    """A run's dynamics per step against the compute charged to its budget (spec 11, 14)."""

    run_id: str
    steps: list[int]
    flops: list[float] = Field(description="FLOPs charged to the budget after each step (spec 14)")
    complexity: dict[str, list[float | None]] = Field(description="per metric, the mean over each step's valid "
                                                                  "proposals")
    coverage: list[StepCoverageOut]
    behavioural_diversity: list[float | None] = Field(
        description="1 - mean Jaccard overlap of the program shapes of the teachers with a valid proposal in the last "
                    "3 steps")
    behavioural_reference: list[float | None] = Field(
        default_factory=list, description="a run of one adapter (the baseline): the same measure of its own valid "
                                          "proposals split in two halves at random, the reference a population's "
                                          "teachers are read against; empty for a population")
    solve_rate: dict[str, list[float | None]] = Field(description="per student, its solve rate at each step")
    oscillation: dict[str, float | None] = Field(
        description="per student, sign changes of its solve rate's first difference over (steps - 2)")
    weight_diversity: list[WeightDiversityAt] = Field(description="steps with two or more members")


class Steps(Model):
    run_id: str
    steps: list[StepSummary]


class TaskOut(Model):
    id: str
    step: int
    task_type: str
    teacher_id: str
    student_id: str
    validated: bool
    valid: bool
    reason: str
    detail: str
    program: str
    inputs: list[str]
    outputs: list[str]
    message: str
    complexity: dict[str, float | None]
    rho: float | None
    text: str = Field(description="the teacher's whole answer, as the model wrote it")
    version: int | None


class StepCount(Model):
    step: int
    proposals: int
    valid: int


class Tasks(Model):
    run_id: str
    step: int
    steps: list[StepCount]
    tasks: list[TaskOut]


class AdapterRecord(Model):
    adapter_id: str
    run_id: str
    role: Role
    status: str
    rank: int = Field(description="the adapter's LoRA rank r (spec 9, \"Mixed ranks\")")
    created_step: int
    retired_step: int | None
    mu: float
    sigma: float
    conservative_skill: float
    matches: int
    wins: int
    losses: int
    draws: int
    operator: str
    params: dict[str, float | int | str | bool | None]
    seed: int
    parents: list[str]


class VersionAt(Model):
    version: int
    step: int = Field(description="the step after which this version was current")


class AdapterPage(Model):
    adapter: AdapterRecord
    k: float = Field(description="the k of mu - k*sigma")
    versions: list[VersionAt]
    store_root: str = Field(description="the run's artifact store, as its config names it")
    store_path: str = Field(description="the directory of the adapter's latest stored version")
    journal: bool = Field(description="whether the coordinator recorded the run (RecordRun)")


class ProposalSample(Model):
    step: int
    id: str
    task_type: str
    text: str
    validated: bool
    valid: bool
    reason: str
    detail: str
    program: str
    rho: float | None
    version: int | None


class AnswerSample(Model):
    step: int
    id: str
    task_id: str
    task_type: str
    text: str
    outcome: str
    program: str
    inputs: list[str]
    outputs: list[str]


class Samples(Model):
    adapter_id: str
    proposals: list[ProposalSample]
    answers: list[AnswerSample]
