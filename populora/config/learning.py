"""Config sections of how a run learns and is measured: tasks, rewards, updates, the warm start, evaluation."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from populora.config.base import CODE_TASK_TYPES, TASK_TYPES, Section


class TasksConfig(Section):
    task_types: list[str] = Field(default_factory=lambda: list(CODE_TASK_TYPES))
    """Task types played each step: any mix of code_i, code_o, code_f (spec 2) and math_w (spec 18)."""
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

    @field_validator("task_types")
    @classmethod
    def _known_types(cls, v: list[str]) -> list[str]:
        unknown = [t for t in v if t not in TASK_TYPES]
        if unknown:
            raise ValueError(f"unknown task type(s) {unknown}; allowed: {list(TASK_TYPES)} (spec 2, 18)")
        if not v:
            raise ValueError(f"no task type: name at least one of {list(TASK_TYPES)}")
        if len(set(v)) != len(v):
            raise ValueError(f"a task type is named twice in {v}; name each once")
        return v


class RewardConfig(Section):
    teacher_reward: Literal["inverse_solve", "learnability"] = "inverse_solve"
    """Teacher reward: `inverse_solve` r = 1 - rho (brief); `learnability` AZR's 1 - rho if 0 < rho < 1 else 0."""
    student_correct: float = 1.0
    """Student reward for a correct attempt (spec 4)."""
    student_wrong: float = -0.5
    """Student reward for a well-formatted wrong attempt (spec 4)."""
    malformed: float = -1.0
    """Reward for malformed output, student or teacher, and for an invalid proposal (spec 4)."""

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
    memory_limit_mb: int = Field(0, ge=0)
    """Memory one update may add to the trainer at rest (the base's weights and the held adapters), in MiB, as the
    memory model predicts it (services/trainer/memory.py; docs/trainer.md, Memory): a micro-batch predicted over it
    is split into smaller ones, and an update with a rollout that cannot fit even alone is refused
    (INVALID_ARGUMENT). 0 = no limit (micro_batch_tokens alone sizes the micro-batches)."""
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
    threads: int = Field(0, ge=-1)
    """Torch threads while an update or the warm start trains; 0 = leave torch's setting, -1 = the cores other
    processes leave free when the update starts (as generation.threads). On a loaded 2-core machine one thread
    trained SmolLM2 about 3x faster than two (docs/warmstart.md); on an idle one two are faster."""


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
    """The benchmark's data file, for benchmarks read from one (humaneval-plus, mbpp-plus, cruxeval-*, jsonl, gsm8k,
    svamp, math500); empty = the publisher's file (cruxeval.jsonl, MbppPlus.jsonl, math/<name>.test.jsonl) in the
    directory $POPULORA_BENCHMARKS names (docs/eval.md)."""
    samples: int = Field(1, ge=1)
    """Answers per problem; 1 = greedy pass@1, more = pass@k with the unbiased estimator (needs temperature > 0)."""
    temperature: float = Field(0.0, ge=0)
    """Sampling temperature of evaluation answers; 0 = greedy."""
    max_new_tokens: int = Field(256, ge=1)
    """Tokens an answer may take."""
    timeout_s: float = Field(10.0, gt=0, le=60)
    """Time limit of one program run with its tests in the sandbox (EvalPlus problems take EvalPlus's limits from
    the canonical solution's time instead: docs/eval.md)."""
    base: bool = True
    """The in-training evaluation also scores the bare base model once (at its first evaluation), for comparison."""
    checkpoints: list[float] = Field(default_factory=lambda: [0.25, 0.5, 0.75, 1.0], min_length=1)
    """`populora experiment`: the compute checkpoints, as fractions of the budget, at which both arms are scored
    (spec 14); each version scored costs one answer per held-out problem, so fewer checkpoints make an experiment
    cheaper (docs/experiment.md)."""
    members: Literal["all", "students"] = "all"
    """`populora experiment`: the population members scored at each checkpoint: every member, or only the students
    (the members trained to solve); the population mean, best and worst member are over these."""
    benchmarks: list[str] = Field(default_factory=lambda: ["cruxeval-o", "cruxeval-i"])
    """`populora experiment`: the published benchmarks scored besides `heldout` (always scored); `--benchmark`
    adds more (humaneval, mbpp-plus). CRUXEval-O and -I, in the formats of code_o and code_i, are the headline: the
    benchmark the Absolute Zero work reports (docs/experiment.md)."""
    curve_limit: int = Field(0, ge=0)
    """`populora experiment`: problems of each benchmark scored at the checkpoints before the last (its first N,
    the same at every checkpoint: the curve); the last checkpoint scores every problem (or --limit). Scoring every
    version on every problem is most of an experiment's cost. 0 = every checkpoint on every problem."""
    heldout_seed: int = Field(0, ge=0)
    """`populora experiment`: the generator seed of its `heldout` problems (`populora eval` always uses 0). A seed no
    earlier evaluation used keeps the problems unseen by whoever chose the design."""
    pass_problems: int = Field(0, ge=0)
    """`populora experiment`: problems of each benchmark answered by generation and scored pass@1, a seeded subset
    fixed in the experiment's problems file before anything is scored (the same for every seed, version and shard;
    docs/experiment.md, "Problem sets"); 0 = every problem (or --limit), as without a problems file."""
    likelihood_problems: int = Field(0, ge=0)
    """`populora experiment`: problems of each task benchmark (heldout, CRUXEval-O and -I) whose reference answer's
    log-probability is scored under every version (populora.evals.likelihood: a prompt pass, no generation), a seeded
    subset fixed in the problems file; reported as `<benchmark>-logprob`. 0 = no likelihood score."""
    subset_seed: int = Field(0, ge=0)
    """`populora experiment`: the seed the problems file's subsets are drawn with (pass_problems, likelihood_problems)."""

    @field_validator("checkpoints")
    @classmethod
    def _fractions(cls, v: list[float]) -> list[float]:
        if any(not 0.0 < f <= 1.0 for f in v):
            raise ValueError(f"every checkpoint is a fraction of the budget in (0, 1], got {v}")
        if len(set(v)) != len(v):
            raise ValueError(f"checkpoints must be distinct, got {v}")
        return sorted(v)
