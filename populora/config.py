"""The one configuration schema of PopuLoRA: pydantic models, presets, overrides, and the loader.

Every default marked [choice] in spec/ALGORITHMS.md is a field here with that default; the docstring of each
field says what it means and cites the spec section. Load a config with `load_config(preset=..., overrides=...)`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

PRESET_DIR = Path(__file__).resolve().parents[1] / "configs"
TASK_TYPES = ("code_i", "code_o", "code_f")  # spec 2
ROLES = ("teacher", "student", "both")  # spec 1; "both": the baseline's single adapter
ALL_TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
OPERATORS = ("M1", "M2", "M3", "M4", "X1", "X2", "X3", "X4")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the field and what is allowed."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


class RunConfig(Section):
    run_id: str = Field("", max_length=200)
    """Run identifier; empty = generated from the preset name and the time at start. It names the run's directory
    and its league records: printable text, no control character."""
    seed: int = 0
    """Seed for every random choice of the run (matchmaking, sampling, operators, references)."""
    steps: int = Field(20, ge=0)
    """Training steps after seeding."""
    mode: Literal["population", "baseline"] = "population"
    """`population`: teachers and students (the method); `baseline`: AZR single-adapter self-play (spec 1)."""
    deployment: Literal["embedded", "distributed"] = "embedded"
    """`embedded`: one process, in-process clients; `distributed`: gRPC services and Redis Streams."""
    output_dir: str = "runs"
    """Where each run writes its metrics (JSONL, TensorBoard) and its report: <output_dir>/<run_id>/."""
    budget_tokens: int = Field(0, ge=0)
    """Compute budget in tokens, generated + trained (spec 14): the run stops at the first step boundary at or past
    it, so two arms can be compared at equal compute. 0 = no budget (run.steps steps)."""
    budget_sandbox_jobs: int = Field(0, ge=0)
    """Compute budget in sandbox jobs (program runs), alike; 0 = none."""

    @field_validator("run_id")
    @classmethod
    def _printable_run_id(cls, value: str) -> str:
        if found := re.search(r"[\x00-\x1f\x7f]", value):
            raise ValueError(f"holds the control character U+{ord(found.group()):04X}; a run id is printable text")
        return value


class ModelConfig(Section):
    name: str = "tiny"
    """Base model: `tiny`, `smollm2-135m`, or a path to a local Hugging Face model directory."""
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    """Weights' dtype; `auto` = bfloat16 on GPU, float32 on CPU."""
    device: str = "auto"
    """`auto`, `cpu`, `cuda`, `cuda:N`."""
    cache_dir: str = ""
    """Where converted models and tokenizers are cached; empty = $POPULORA_CACHE or ~/.cache/populora."""
    chat_template: bool = True
    """Format prompts with the model's chat template (off: plain text prompts)."""


class LoraConfigModel(Section):
    rank: int = Field(32, ge=1, le=512)
    """LoRA rank r of every adapter (spec 1: rank 32)."""
    alpha: float = Field(64.0, gt=0)
    """lora_alpha; the update is (alpha / r) * B A^T."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """LoRA dropout during training."""
    target_modules: list[str] = Field(default_factory=lambda: list(ALL_TARGET_MODULES))
    """Projections that carry LoRA (spec 1: all attention and MLP projections)."""
    host: Literal["auto", "batched", "peft"] = "auto"
    """How adapters sit on the base, in inference and the trainer alike (populora/adapters.py): `batched`, our
    per-row LoRA layer (many adapters in one pass; no dropout); `peft`, PEFT's LoraModel (inference: its
    `adapter_names` mixed batch; training: one adapter per pass, dropout included). `auto`: batched for inference;
    for the trainer batched when trainer.batch_mode resolves to batched, else peft."""


class PopulationConfig(Section):
    n_teachers: int = Field(4, ge=1)
    """Teachers T1..Tn (spec 1: standard 4)."""
    n_students: int = Field(4, ge=1)
    """Students S1..Sm (spec 1: standard 4)."""


class TasksConfig(Section):
    task_types: list[Literal[TASK_TYPES]] = Field(default_factory=lambda: list(TASK_TYPES))
    """Task types played each step (spec 2)."""
    proposals_per_teacher: int = Field(2, ge=1)
    """Proposals each teacher writes per task type per step (its batch of tasks in a match)."""
    n_samples: int = Field(4, ge=1)
    """[choice] Student samples per task; rho is their mean correctness (spec 4: AZR 8, ours 4)."""
    n_references: int = Field(6, ge=0)
    """K reference triplets shown in a teacher's prompt (spec 10)."""
    code_f_inputs: int = Field(10, ge=2)
    """N inputs a code_f teacher writes; the solver sees N/2 pairs and is checked on the other N/2 (spec 2)."""
    buffer_cap: int = Field(1024, ge=1)
    """[choice] FIFO cap of each task type's buffer; the oldest entries are dropped (spec 10)."""
    seed_buffer_size: int = Field(256, ge=1)
    """Valid triplets per task type the base model proposes before training starts (spec 10: AZR 256)."""
    seed_max_rounds: int = Field(20, ge=1)
    """Give up seeding after this many proposal rounds and go on with what the buffers hold."""
    timeout_s: float = Field(5.0, gt=0)
    """[choice] Time limit of one program run during validation (spec 3.5: AZR 10 s, ours 5 s)."""
    deterministic_runs: int = Field(2, ge=1)
    """[choice] Fresh-process runs that must agree for a proposal to be deterministic (spec 3.6)."""
    max_output_repr: int = Field(1000, ge=1)
    """[choice] Longest output repr accepted; longer proposals are rejected (spec 3.7)."""
    restricted_expressions: bool = True
    """[choice] Model-written inputs and predicted outputs must be restricted expressions (spec 3.4)."""


class RewardConfig(Section):
    teacher_reward: Literal["inverse_solve", "learnability"] = "inverse_solve"
    """Teacher reward: `inverse_solve` r = 1 - rho (brief); `learnability` AZR's 1 - rho if 0 < rho < 1 else 0."""
    student_correct: float = 1.0
    """Student reward for a correct attempt (spec 4)."""
    student_wrong: float = -0.5
    """Student reward for a well-formatted wrong attempt (spec 4)."""
    malformed: float = -1.0
    """Reward for malformed output, student or teacher, and for an invalid proposal (spec 4)."""


class GenerationConfig(Section):
    backend: Literal["hf", "vllm"] = "hf"
    """Inference backend: transformers+batched LoRA (`hf`) or vLLM."""
    max_new_tokens: int = Field(512, ge=1)
    """Token budget of one completion."""
    teacher_max_new_tokens: int = Field(0, ge=0)
    """Token budget of a proposal; 0 = max_new_tokens."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature (0 = greedy)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling threshold."""
    max_batch: int = Field(256, ge=1)
    """Most rows (requests x n) in one Generate call; beyond it the service answers RESOURCE_EXHAUSTED."""
    max_resident_adapters: int = Field(32, ge=1)
    """Adapter versions kept resident; the least recently used is evicted beyond it."""
    max_loras: int = Field(16, ge=1)
    """vLLM: adapters in one batch."""
    max_lora_rank: int = Field(32, ge=1)
    """vLLM: the largest rank it will serve."""
    max_cpu_loras: int = Field(64, ge=1)
    """vLLM: adapters cached in CPU memory."""
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    """vLLM: fraction of GPU memory it may take."""
    tensor_parallel_size: int = Field(1, ge=1)
    """vLLM: GPUs the base is split over."""
    threads: int = Field(0, ge=-1)
    """`hf` on CPU: torch threads while a batch decodes; 0 = leave torch's setting, -1 = the cores other processes
    leave free, measured before each batch. On a loaded 2-core machine one thread decoded SmolLM2 about 3x faster
    than two (docs/warmstart.md); on an idle one two are 1.4-1.5x faster. Thread counts change float rounding, so a
    run that must repeat bit for bit on another machine sets a fixed count."""


class TrainerConfig(Section):
    lr: float = Field(1e-5, gt=0)
    """[choice] AdamW learning rate for LoRA (spec 5: about 10x AZR's full fine-tuning 1e-6)."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    grad_clip: float = Field(1.0, gt=0)
    """Global gradient-norm clip (spec 5)."""
    entropy_coef: float = Field(0.0, ge=0)
    """Entropy bonus (spec 5: optional, 0.001 when on)."""
    ppo_clip: float = Field(0.2, gt=0)
    """PPO ratio clip, active only with more than one epoch (spec 5)."""
    epochs: int = Field(1, ge=1)
    """Passes over a batch of rollouts (1 = on-policy, the clip is a no-op)."""
    micro_batch_tokens: int = Field(4096, ge=16)
    """Memory budget: tokens (prompt + response) in one forward/backward; gradients accumulate across them."""
    logprob_chunk_tokens: int = Field(256, ge=1)
    """Response tokens whose logits (tokens x vocabulary, float32) exist at once, in the forward and the backward
    pass of the log-probabilities; the results do not depend on it (docs/trainer.md, Memory)."""
    activation_checkpointing: bool = True
    """Keep only each decoder layer's input for the backward pass and run the layer again there: a pass holds one
    layer's activations instead of every layer's, for about a third more compute (docs/trainer.md, Memory)."""
    mmap_threshold_kb: int = Field(1024, ge=0)
    """Linux (glibc): allocations of at least this many KB get their own pages, returned to the system when freed;
    0 = glibc's own threshold, which rises to 32 MB after the first large free, so the freed activations of an update
    stay in the heap, fragmented (1.1 GB more resident memory per 1,024 tokens measured on SmolLM2; docs/trainer.md).
    Set once for the whole process when the trainer starts."""
    attention: Literal["auto", "sdpa", "eager"] = "sdpa"
    """Attention of the trainer's passes: `sdpa` (torch's scaled_dot_product_attention, which does not keep the
    (T x T) score matrix where torch has a fused kernel for the device), `eager` (transformers' matmul-softmax), or
    `auto` (what transformers picks for the model)."""
    batch_mode: Literal["auto", "batched", "sequential"] = "auto"
    """Several adapters' updates in one pass (`batched`) or one by one; `auto`: batched on GPU, sequential on CPU."""
    adv_eps: float = 1e-6
    """epsilon in A = (r - mean) / (std + eps) (spec 5)."""
    threads: int = Field(0, ge=0)
    """Torch threads while an update or the warm start trains; 0 = leave torch's setting. On a loaded 2-core machine
    one thread trained SmolLM2 about 3x faster than two (docs/warmstart.md)."""


class WarmStartConfig(Section):
    enabled: bool = False
    """[choice] Fit one initial adapter on the answer formats before step 0 and start every member, population and
    baseline alike, from it (spec 13). Off for 7B coder models, which write the formats unaided."""
    programs: int = Field(36, ge=1)
    """Programs generated per task type from the warm-start templates (populora.tasks.seedgen), each verified in the
    sandbox; the examples are drawn from them. The held-out templates are never used."""
    seed: int = 0
    """Seed of the program generator and of the example order (the same seed gives the same adapter)."""
    steps: int = Field(32, ge=1)
    """Supervised steps of the warm-up (32 x 4 examples taught SmolLM2 the formats; docs/warmstart.md)."""
    batch_size: int = Field(4, ge=1)
    """Examples per step, teacher and student examples in turn over the task types."""
    lr: float = Field(1e-3, gt=0)
    """AdamW learning rate of the warm-up (a supervised fit of the formats, far above the RL rate of spec 5)."""
    prompt_grad: bool = False
    """Backpropagate through the examples' prompts too. Off: each prompt runs once without gradient (its keys and
    values are constants of the fit) and the backward pass covers the answer only, about twice as fast on a CPU."""
    teacher_fraction: float = Field(0.5, ge=0, le=1)
    """Fraction of the examples in the teacher's format (proposals); the rest are student answers."""
    n_references: int = Field(-1, ge=-1)
    """References shown in the warm-start teacher prompts; -1 = tasks.n_references, as the run's prompts show."""
    cache: bool = True
    """Reuse a warm-started adapter from the cache, keyed by a digest of the base model, the examples and the
    hyperparameters; a damaged entry is detected and fitted again."""
    cache_dir: str = ""
    """Where fitted warm starts are cached; empty = <model cache>/warmstart ($POPULORA_CACHE or
    ~/.cache/populora, like the converted models)."""


class EvalConfig(Section):
    every: int = Field(0, ge=0)
    """Evaluate the whole population on `eval.benchmark` every this many steps, as a phase of its own (`eval`,
    persisted, resumable); 0 = off. Scores go to the league (docs/eval.md)."""
    benchmark: str = "heldout"
    """The benchmark of the in-training evaluation and the default of `populora eval` (populora.evals.BENCHMARKS)."""
    limit: int = Field(30, ge=1)
    """Problems per evaluation: the first N of the benchmark (the same N problems at every evaluation)."""
    data: str = ""
    """The benchmark's data file, for benchmarks read from one (humaneval-plus, mbpp-plus, cruxeval-*, jsonl)."""
    samples: int = Field(1, ge=1)
    """Answers per problem; 1 = greedy pass@1, more = pass@k with the unbiased estimator (needs temperature > 0)."""
    temperature: float = Field(0.0, ge=0)
    """Sampling temperature of evaluation answers; 0 = greedy."""
    max_new_tokens: int = Field(256, ge=1)
    """Tokens an answer may take."""
    timeout_s: float = Field(10.0, gt=0, le=60)
    """Time limit of one program run with its tests in the sandbox."""
    base: bool = True
    """The in-training evaluation also scores the bare base model once (at its first evaluation), for comparison."""


class LeagueConfig(Section):
    mu: float = 25.0
    """TrueSkill initial mean mu0 (spec 6)."""
    sigma: float = 25.0 / 3
    """TrueSkill initial deviation sigma0 (spec 6)."""
    beta: float = 25.0 / 6
    """TrueSkill performance deviation beta = sigma0/2 (spec 6)."""
    tau: float = 25.0 / 300
    """TrueSkill dynamics tau = sigma0/100 (spec 6)."""
    draw_probability: float = Field(0.10, ge=0, lt=1)
    """TrueSkill draw probability (spec 6)."""
    k: float = Field(3.0, ge=0)
    """Conservative skill = mu - k*sigma (spec 6)."""
    outcome: Literal["aggregate", "per_task"] = "aggregate"
    """[choice] One game per match from mean rho with a margin, or one game per task (spec 6)."""
    margin: float = Field(0.05, ge=0, lt=0.5)
    """[choice] Student wins if mean rho > 0.5 + margin, teacher if < 0.5 - margin, else draw (spec 6)."""
    pfsp: Literal["var", "hard"] = "var"
    """PFSP weighting: f_var(x) = x(1-x) or f_hard(x) = (1-x)^p (spec 7)."""
    pfsp_p: float = Field(2.0, gt=0)
    """Exponent p of f_hard (spec 7)."""
    pfsp_floor: float = Field(0.01, ge=0)
    """Floor on each PFSP weight, so every pairing stays possible (spec 7)."""
    payoff_decay: float = Field(0.9, gt=0, le=1)
    """Exponential decay of the teacher x student payoff matrix per new match."""
    db_url: str = "sqlite:///{output_dir}/league.sqlite"
    """SQLAlchemy URL of the league database; `{output_dir}` is filled in. Distributed: postgresql+psycopg://..."""
    read_cache_s: float = Field(1.0, ge=0)
    """REST read cache lifetime in seconds (leaderboard, payoff); writes through the same service invalidate it at
    once, so this only bounds how stale writes made by another league replica can look. 0 = no cache."""
    read_queries: int = Field(0, ge=0, le=1024)
    """REST reads that query the database at once (the leaderboard, curves, lineage...); the others wait their turn
    in arrival order. A few queries in flight keep the cores busy; dozens only share them out unevenly, which is
    what a slow tail is made of. 0 = twice the CPU cores."""


class EvolutionConfig(Section):
    every_k: int = Field(10, ge=1)
    """[choice] Replace members every k steps (spec 8: default 10)."""
    gamma: float = Field(0.25, gt=0, lt=1)
    """[choice] Fraction of each sub-population replaced: ceil(gamma*N) (spec 8)."""
    tournament_size: int = Field(2, ge=1)
    """[choice] Tournament size for drawing a pair of parents from the top half (spec 8)."""
    operator_mix: dict[str, float] = Field(
        default_factory=lambda: {"M1": 0.2, "M2": 0.1, "M3": 0.1, "M4": 0.1, "X1": 0.15, "X2": 0.1,
                                 "X3": 0.1, "X4": 0.15})
    """[choice] Probability of each operator when making a child (spec 9)."""
    epsilon: float = Field(0.1, gt=0, le=1)
    """[choice] Mutation scale epsilon of M1-M3 (spec 9)."""
    m4_epsilon: float = Field(0.15, gt=0, le=1)
    """[choice] Mutation scale of M4 (spec 9)."""
    self_adapt_epsilon: bool = True
    """[choice] Self-adapt epsilon per member: log eps += tau * N(0,1), clamped (spec 9)."""
    epsilon_tau: float = Field(0.05, ge=0)
    """[choice] Step size of the log-normal self-adaptation (spec 9)."""
    epsilon_min: float = Field(1e-4, gt=0)
    """Lower clamp of a self-adapted epsilon (spec 9)."""
    epsilon_max: float = Field(1.0, gt=0)
    """Upper clamp of a self-adapted epsilon (spec 9)."""
    m2_fraction: float = Field(0.33, gt=0, le=1)
    """[choice] Fraction of modules M2 perturbs, at least one (spec 9)."""
    m3_fraction: float = Field(0.3, gt=0, lt=1)
    """[choice] Fraction of singular components M3 zeroes, ceil(fraction * r) (spec 9)."""
    dare_p: float = Field(0.7, ge=0, lt=1)
    """[choice] DARE drop probability p of X1 (spec 9)."""
    x4_eta_min: float = Field(1.0, ge=0)
    """[choice] X4 extrapolation eta ~ U(min, max) (spec 9)."""
    x4_eta_max: float = Field(1.5, ge=0)
    """[choice] X4 extrapolation eta ~ U(min, max) (spec 9)."""
    threads: int = Field(1, ge=0)
    """Torch threads of the evolver's math while it makes a child; 0 = leave torch's setting. Its work is many small
    (r x r) decompositions and tall-skinny products, where one thread was ~10x faster than two on a loaded 2-core
    machine (docs/evolver.md)."""
    device: str = Field("cpu", pattern=r"^(cpu|auto|cuda(:\d+)?)$")
    """Where the operators' full-size work runs (Grams, tall products, noise and masks): `cpu`, `cuda`, `cuda:N`, or
    `auto` (a GPU when there is one). The r x r decompositions stay on the CPU; a child is reproducible from its
    seed on one kind of device (a GPU draws its noise and masks from its own generator) (docs/evolver.md)."""

    @field_validator("operator_mix")
    @classmethod
    def _known_operators(cls, mix: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(mix) - set(OPERATORS))
        if unknown:
            raise ValueError(f"unknown operator(s) {unknown}; allowed: {list(OPERATORS)}")
        if any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
            raise ValueError("weights must be >= 0 and sum to more than 0")
        return mix


class SandboxConfig(Section):
    backend: Literal["zygote", "subprocess", "gvisor"] = "zygote"
    """Executor: warm forking zygotes in a jail (default), one plain subprocess per job, or zygotes each inside
    one long-lived gVisor sandbox (runsc, ptrace platform) started by this service."""
    workers: int = Field(0, ge=0)
    """Worker processes; 0 = one per core."""
    timeout_s: float = Field(5.0, gt=0)
    """[choice] Wall-clock limit of one job (spec 3.5)."""
    memory_mb: int = Field(256, ge=16)
    """Address-space limit of one job."""
    output_kb: int = Field(64, ge=1)
    """Largest stdout + result of one job."""
    isolation: Literal["auto", "bwrap", "unshare", "gvisor", "none"] = "auto"
    """Jail of the zygote backend; `auto` = bwrap, else unshare; `gvisor` when the sandbox itself runs inside
    gVisor (a container under runsc: no namespaces there, uid, rlimits and seccomp checked at start-up);
    `none` only for development."""
    seccomp: bool = True
    """Install the seccomp filter in every job."""
    verifiers: dict[str, str] = Field(default_factory=dict)
    """External verifier name per task type (registered over REST); a task type not named uses the sandbox."""
    verifier_timeout_s: float = Field(10.0, gt=0)
    """Timeout of one call to an external verifier."""
    verifier_retries: int = Field(2, ge=0)
    """Retries of a failed external-verifier call."""
    breaker_failures: int = Field(5, ge=1)
    """Consecutive failures that open an external verifier's circuit breaker."""
    breaker_reset_s: float = Field(30.0, gt=0)
    """Seconds an open circuit breaker waits before it lets one call through."""
    db_url: str = ""
    """Database of the external-verifier registry; empty = league.db_url (one shared database)."""


class QueueConfig(Section):
    backend: Literal["inprocess", "redis"] = "inprocess"
    """Step-phase queue: in-process (embedded) or Redis Streams (distributed)."""
    redis_url: str = "redis://127.0.0.1:6379/0"
    """Redis server of the streams."""
    claim_idle_ms: int = Field(60_000, ge=100)
    """A pending entry idle this long is reclaimed by another consumer."""
    stream_prefix: str = "populora"
    """Prefix of the stream and group names."""


class OutageConfig(Section):
    wait_s: float = Field(300.0, ge=0)
    """How long the coordinator and the phase workers wait for Postgres, Redis or a service that went away (or
    answers UNAVAILABLE while its own database is away), retrying with exponential backoff, before the call fails
    naming what did not come back (0 = fail at once)."""
    backoff_initial_s: float = Field(0.5, gt=0)
    """Pause before the first retry; each next pause doubles, up to backoff_max_s."""
    backoff_max_s: float = Field(10.0, gt=0)
    """Longest pause between two retries."""

    @model_validator(mode="after")
    def _ordered(self) -> OutageConfig:
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("outage.backoff_max_s must be >= outage.backoff_initial_s")
        return self


class ServiceEndpoint(Section):
    host: str = "127.0.0.1"
    """Address clients connect to (a host name in containers: `league`, `sandbox`, ...)."""
    bind: str = "127.0.0.1"
    """Address the service listens on: loopback unless a deployment says otherwise (the container files bind
    0.0.0.0, inside their own network namespace)."""
    port: int = Field(ge=1, le=65535)
    """gRPC port."""
    metrics_port: int = Field(0, ge=0, le=65535)
    """Prometheus /metrics port (0 = the REST port where the service has one, else none)."""
    rest_port: int = Field(0, ge=0, le=65535)
    """REST port (league and sandbox); 0 = no REST."""


class ServicesConfig(Section):
    inference: ServiceEndpoint = ServiceEndpoint(port=50051, metrics_port=9101)
    """Inference service endpoint."""
    trainer: ServiceEndpoint = ServiceEndpoint(port=50052, metrics_port=9102)
    """Trainer service endpoint."""
    league: ServiceEndpoint = ServiceEndpoint(port=50053, rest_port=8080)
    """League service endpoint (REST leaderboard on rest_port)."""
    sandbox: ServiceEndpoint = ServiceEndpoint(port=50054, rest_port=8081)
    """Sandbox service endpoint (REST on rest_port)."""
    evolver: ServiceEndpoint = ServiceEndpoint(port=50055, metrics_port=9105)
    """Evolver service endpoint."""
    grpc_timeout_s: float = Field(600.0, gt=0)
    """Deadline of one gRPC call from the coordinator."""
    grpc_retries: int = Field(3, ge=0, le=4)
    """Retries of a gRPC call that finds its server UNAVAILABLE (restarting); every write is idempotent."""
    token: str = ""
    """Bearer token every write needs, gRPC (`authorization` metadata) and REST (`Authorization` header) alike; read
    from $POPULORA_TOKEN (or the file $POPULORA_TOKEN_FILE names) when that is set. A server with no token refuses
    every write; reads stay open."""

    @model_validator(mode="before")
    @classmethod
    def _merge_endpoint_defaults(cls, data: Any) -> Any:
        # `--set services.evolver.metrics_port=9999` gives a partial endpoint; fill the rest from the defaults.
        if isinstance(data, dict):
            data = dict(data)
            for name, field_info in cls.model_fields.items():
                given = data.get(name)
                if isinstance(given, dict) and isinstance(field_info.default, ServiceEndpoint):
                    data[name] = {**field_info.default.model_dump(), **given}
        return data


class StoreConfig(Section):
    root: str = "{output_dir}/store"
    """Artifact store directory (a shared volume in compose/k8s); `{output_dir}` is filled in."""


class Config(Section):
    """A whole PopuLoRA configuration."""

    run: RunConfig = RunConfig()
    """Run identity, length and mode."""
    model: ModelConfig = ModelConfig()
    """The frozen base model."""
    lora: LoraConfigModel = LoraConfigModel()
    """Shape of every adapter."""
    population: PopulationConfig = PopulationConfig()
    """Sizes of the two sub-populations."""
    tasks: TasksConfig = TasksConfig()
    """AZR task types, buffers and proposal validation (spec 2, 3, 10)."""
    rewards: RewardConfig = RewardConfig()
    """Rewards (spec 4)."""
    generation: GenerationConfig = GenerationConfig()
    """Inference backend and sampling."""
    trainer: TrainerConfig = TrainerConfig()
    """TRR++ updates (spec 5)."""
    warmstart: WarmStartConfig = WarmStartConfig()
    """The warm start before step 0: one adapter fitted on the answer formats, every member's start (spec 13)."""
    eval: EvalConfig = EvalConfig()
    """Held-out benchmarks: the in-training evaluation phase and `populora eval` defaults (docs/eval.md)."""
    league: LeagueConfig = LeagueConfig()
    """Ratings, matchmaking and the league database (spec 6-7)."""
    evolution: EvolutionConfig = EvolutionConfig()
    """Evolutionary replacement and operators (spec 8-9)."""
    sandbox: SandboxConfig = SandboxConfig()
    """The verifier: isolation, limits, external verifiers."""
    queue: QueueConfig = QueueConfig()
    """Step-phase queue."""
    outage: OutageConfig = OutageConfig()
    """Waiting out Postgres, Redis or a service going away (retries with exponential backoff, bounded)."""
    services: ServicesConfig = ServicesConfig()
    """Service endpoints (distributed mode)."""
    store: StoreConfig = StoreConfig()
    """The artifact store."""

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        if self.evolution.x4_eta_max < self.evolution.x4_eta_min:
            raise ValueError("evolution.x4_eta_max must be >= evolution.x4_eta_min")
        if self.evolution.epsilon_max < self.evolution.epsilon_min:
            raise ValueError("evolution.epsilon_max must be >= evolution.epsilon_min")
        unknown = sorted(set(self.sandbox.verifiers) - set(TASK_TYPES))
        if unknown:
            raise ValueError(f"sandbox.verifiers: unknown task type(s) {unknown}; allowed: {list(TASK_TYPES)}")
        return self

    # Paths with {output_dir} resolved.
    def resolve(self, template: str) -> str:
        return template.replace("{output_dir}", self.run.output_dir)

    @property
    def store_root(self) -> Path:
        return Path(self.resolve(self.store.root))

    @property
    def league_db_url(self) -> str:
        url = self.resolve(self.league.db_url)
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        return url

    @property
    def teacher_max_new_tokens(self) -> int:
        return self.generation.teacher_max_new_tokens or self.generation.max_new_tokens

    def to_yaml(self) -> str:
        """The config as YAML, as runs store it; secrets (services.token) are left out."""
        tree = self.model_dump(mode="json")
        tree["services"]["token"] = ""
        return yaml.safe_dump(tree, sort_keys=False, width=110)


def list_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set '{dotted}': '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", value parsed as YAML: numbers, booleans, lists, strings)."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' is not of the form section.field=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override '{text}' has no field name")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


# Environment variables that name one field directly (secrets are set this way in containers and CI).
ENV_ALIASES = {"POPULORA_TOKEN": "services.token"}


def _environment() -> dict[str, str]:
    """The POPULORA* environment variables, where NAME_FILE=PATH (NAME an alias or a POPULORA__ variable) stands for
    NAME set to the file's content, final newline dropped: how Docker and Kubernetes hand a container its secrets
    without putting them in any process's environment, which a job in the gVisor sandbox could read."""
    env = {k: v for k, v in os.environ.items() if k.startswith("POPULORA")}
    for name in [n for n in env if n.endswith("_FILE")]:
        target = name.removesuffix("_FILE")
        if target not in ENV_ALIASES and not target.startswith("POPULORA__"):
            continue
        if target in env:
            raise ConfigError(f"both {target} and {name} are set; set only one of them")
        path = env.pop(name)
        try:
            env[target] = Path(path).read_text().removesuffix("\n")
        except OSError as e:
            raise ConfigError(f"{name}={path}: cannot read the file ({e.strerror}); it must hold the value of "
                              f"{target}") from None
    return env


def _env_overrides() -> list[tuple[str, Any]]:
    """POPULORA__SECTION__FIELD=value environment variables (how containers configure services), and the aliases
    of ENV_ALIASES (taken as plain strings); either may come from a file (NAME_FILE, see _environment)."""
    environ = _environment()
    out: list[tuple[str, Any]] = [(field, environ[name]) for name, field in ENV_ALIASES.items()
                                  if environ.get(name)]
    for name, raw in sorted(environ.items()):
        if name.startswith("POPULORA__") and len(name) > len("POPULORA__"):
            dotted = ".".join(p.lower() for p in name[len("POPULORA__"):].split("__"))
            out.append(parse_override(f"{dotted}={raw}"))
    return out


def _format_error(err: ValidationError, source: str) -> str:
    lines = [f"invalid configuration ({source}):"]
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        lines.append(f"  {field}: {msg}" + (f" (got {e['input']!r})" if "input" in e and e["type"] != "extra_forbidden"
                                             and not isinstance(e["input"], dict) else ""))
    return "\n".join(lines)


# Fields of earlier releases that a stored run's config may still hold: dropped on load.
LEGACY_FIELDS = ("league.token", "sandbox.token", "generation.lora_path")


def _drop_legacy(tree: dict[str, Any]) -> None:
    for dotted in LEGACY_FIELDS:
        section, name = dotted.split(".")
        if isinstance(tree.get(section), dict):
            tree[section].pop(name, None)


def config_from_yaml(text: str, source: str = "a stored run's config") -> Config:
    """A config a run stored (Config.to_yaml): no environment overrides, so the run keeps the settings it started
    with, except its secrets, which are never stored and come from the environment (ENV_ALIASES)."""
    try:
        tree = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{source} is not valid YAML: {e}") from e
    if not isinstance(tree, dict):
        raise ConfigError(f"{source} must hold a mapping of sections")
    _drop_legacy(tree)
    environ = _environment()
    for name, dotted in ENV_ALIASES.items():
        if environ.get(name):
            _set_path(tree, dotted, environ[name])
    try:
        return Config.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(_format_error(e, source)) from None


def load_config(preset: str | None = None, path: str | Path | None = None,
                overrides: list[str] | None = None, env: bool = True) -> Config:
    """Preset or file, then POPULORA__* environment variables, then `--set` overrides; validated at the end."""
    tree: dict[str, Any] = {}
    source = "defaults"
    if path is None and preset is None and os.environ.get("POPULORA_CONFIG"):
        path = os.environ["POPULORA_CONFIG"]
    if preset is not None:
        file = PRESET_DIR / f"{preset}.yaml"
        if not file.exists():
            raise ConfigError(f"unknown preset '{preset}'; allowed: {list_presets()}")
        path, source = file, f"preset {preset}"
    if path is not None:
        file = Path(path)
        if not file.exists():
            raise ConfigError(f"config file not found: {file}")
        try:
            tree = yaml.safe_load(file.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {file} is not valid YAML: {e}") from e
        if not isinstance(tree, dict):
            raise ConfigError(f"config file {file} must hold a mapping of sections")
        source = source if preset else str(file)
    _drop_legacy(tree)
    pairs = (_env_overrides() if env else []) + [parse_override(o) for o in overrides or []]
    for key, value in pairs:
        _set_path(tree, key, value)
    try:
        return Config.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(_format_error(e, source)) from None


def field_docs(model: type[BaseModel] = Config, prefix: str = "") -> dict[str, str]:
    """Every field's dotted path -> its documentation (used by `populora config docs` and the tests)."""
    out: dict[str, str] = {}
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out[path] = info.description or (ann.__doc__ or "")
            out.update(field_docs(ann, path + "."))
        else:
            out[path] = info.description or ""
    return out
