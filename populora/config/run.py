"""Config sections of what runs: the run itself, the base model, the shape of its adapters, and generation."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from populora import names
from populora.config.base import ALL_TARGET_MODULES, MAX_RANK, Section, check_ranks


class RunConfig(Section):
    run_id: str = ""
    """Run identifier; empty = generated from the preset name and the time at start. It names the run's directory
    (<output_dir>/<run_id>), its adapters (<run_id>.T0, ...) and its league records, so it follows the rule of every
    id (populora.names): 1-100 letters, digits, '_', '.' and '-', starting with a letter or digit."""
    seed: int = 0
    """Seed for every random choice of the run (matchmaking, sampling, operators, references)."""
    reproducible: bool = False
    """[choice] Two runs of the same seed and run id, on the same machine with the same settings, make the same
    records and adapter weights, embedded or distributed: a thread count of -1 (generation.threads,
    trainer.threads), which follows the machine's load, becomes 1, since another count rounds the matmuls
    otherwise and a token drawn on the edge of two changes. Costs the second core on an idle machine (docs/
    architecture.md, "Reproducing a run"); cpu-smol-experiment and bench.pipeline set it."""
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
    budget_flops: int = Field(0, ge=0)
    """Compute budget in FLOPs (spec 14: 2N per prompt or generated token, 6N per trained token; the warm start,
    evaluation and evolution not charged): the run stops at the first step boundary at or past it; an experiment
    compares its arms at fractions of it. 0 = none."""
    budget_sandbox_jobs: int = Field(0, ge=0)
    """Compute budget in sandbox jobs (program runs), alike; 0 = none."""

    @field_validator("run_id")
    @classmethod
    def _run_id_is_a_name(cls, value: str) -> str:
        why = names.reason(value, names.MAX_RUN_ID) if value else ""
        if why:
            raise ValueError(why)
        return value


class LoopConfig(Section):
    max_staleness: int = Field(0, ge=0)
    """k of spec 16: how many versions behind the version it trains, the policy that generated a step's rollouts may
    be. 0 = lock-step (a step starts when the previous one has finished); k >= 1 lets the games of step t+1 run while
    step t's update trains, and the update weights each token by its clipped importance ratio against the behaviour
    log-probabilities recorded at generation. Unset, it is 1 in distributed mode (and the GPU presets), where the
    trainer and inference have machines of their own that would otherwise wait for each other, and 0 embedded."""


class ModelConfig(Section):
    name: str = "tiny"
    """Base model: `tiny`, `smollm2-135m`, or a path to a local Hugging Face model directory."""
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    """Weights' dtype; `auto` = bfloat16 on GPU, float32 on CPU."""
    base_matmul: Literal["native", "bfloat16"] = "native"
    """[choice] The frozen base's matrix products (its seven projections per layer; not the LM head, the attention
    or the adapters), in inference and in updates: `native`, in the weights' dtype; `bfloat16`, inputs and weights
    rounded to bfloat16 and accumulated in float32 by oneDNN, the results back in the weights' dtype, on a float32
    base on a CPU that multiplies bfloat16 natively (AVX-512 BF16, AMX; elsewhere ignored with a warning). About
    twice the float32 peak, and it moves results: on SmolLM2 a chosen token's log-probability by up to about 0.1,
    and a greedy answer can differ from its first token (docs/performance.md has the measurements). The warm start
    fits in the native dtype either way, so its cached adapter is shared."""
    device: str = "auto"
    """`auto`, `cpu`, `cuda`, `cuda:N`."""
    cache_dir: str = ""
    """Where converted models and tokenizers are cached; empty = $POPULORA_CACHE or ~/.cache/populora."""
    chat_template: bool = True
    """Format prompts with the model's chat template (off: plain text prompts)."""


class LoraConfigModel(Section):
    rank: int = Field(32, ge=1, le=MAX_RANK)
    """LoRA rank r of every adapter that teacher_ranks / student_ranks do not name (spec 1: rank 32), of the
    baseline's one adapter, and of the warm start's (members of another rank start from it brought to theirs)."""
    teacher_ranks: list[int] = Field(default_factory=list)
    """[choice] Initial ranks of the teachers (spec 9, "Mixed ranks"): teacher i gets teacher_ranks[i % len], e.g.
    [8, 16, 32, 64]; empty = `rank` for every teacher, the method as written."""
    student_ranks: list[int] = Field(default_factory=list)
    """[choice] Initial ranks of the students, as teacher_ranks; empty = `rank` for every student."""
    alpha: float = Field(64.0, gt=0)
    """lora_alpha of every adapter, whatever its rank; the update is (alpha / r) * B A^T, so with Adam the best
    learning rate hardly depends on r ("LoRA Without Regret")."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """LoRA dropout during training."""
    target_modules: list[str] = Field(default_factory=lambda: list(ALL_TARGET_MODULES))
    """Projections that carry LoRA (spec 1: all attention and MLP projections)."""
    host: Literal["auto", "batched", "peft"] = "auto"
    """How adapters sit on the base, in inference and the trainer alike (populora/adapters.py): `batched`, our
    per-row LoRA layer (many adapters in one pass; no dropout); `peft`, PEFT's LoraModel (inference: its
    `adapter_names` mixed batch; training: one adapter per pass, dropout included). `auto`: batched for inference;
    for the trainer batched when trainer.batch_mode resolves to batched, else peft."""

    @field_validator("teacher_ranks", "student_ranks")
    @classmethod
    def _ranks_in_range(cls, ranks: list[int]) -> list[int]:
        return check_ranks(ranks)

    def initial_rank(self, role: str, index: int) -> int:
        """The rank member `index` of a role starts with: its role's list, cycled, else `rank` (the baseline's
        `both` adapter too)."""
        ranks = {"teacher": self.teacher_ranks, "student": self.student_ranks}.get(role) or []
        return ranks[index % len(ranks)] if ranks else self.rank

    def initial_ranks(self) -> set[int]:
        """Every rank a member may start with."""
        return {self.rank, *self.teacher_ranks, *self.student_ranks}

    def mixed_ranks(self) -> tuple[list[int], list[int]]:
        """The initial ranks of teachers and students in an experiment's mixed-rank arm: teacher_ranks and
        student_ranks where they are set, else r/4, r/2, r and 2r of `rank` (8, 16, 32, 64 at rank 32)."""
        rule = sorted({min(MAX_RANK, max(1, r)) for r in (self.rank // 4, self.rank // 2, self.rank, 2 * self.rank)})
        return self.teacher_ranks or rule, self.student_ranks or rule

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
    """The largest rank inference serves, raised to the run's largest (lora.teacher_ranks, student_ranks,
    evolution.ranks): the hf backend's slot banks are this wide, and vLLM's max_lora_rank is this, rounded up to a
    size vLLM offers (8, 16, 32, 64, 128, 256, 320, 512). Both zero-pad a smaller adapter to it (docs/inference.md,
    "Mixed ranks")."""
    max_cpu_loras: int = Field(64, ge=1)
    """vLLM: adapters cached in CPU memory."""
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    """vLLM: fraction of GPU memory it may take."""
    tensor_parallel_size: int = Field(1, ge=1)
    """vLLM: GPUs the base is split over."""
    prepack_weights: bool = True
    """`hf` on CPU in float32: the base's linear weights and LM head are laid out once for oneDNN's matmul
    (populora/lora/prepack.py), for passes without gradients. On SmolLM2-135M a decode step of 12 rows took 155 ms
    against 214 with PyTorch's default fp32 matmul, 24 rows 248 against 258, one row 72 against 67; the packed copy
    costs about 540 MB more memory. Nothing changes on a GPU or in another dtype. The kernels differ, so a token can
    differ where two candidates tie to the last bits."""
    batch_invariant: bool = False
    """`hf`: decode and score each request in batches of its own rows only, so a row's tokens and log-probabilities
    do not depend on what else was asked at the same time, on which replica it ran or in which slot its adapter sits.
    A CPU matmul rounds a row differently with the number of rows beside it (a row alone and the same row among 3
    differ by ~2e-7 here), and the LoRA layer takes another batched path with another slot layout, so without it a
    distributed run whose batches split or whose replicas restart parts from the one-process run in the last digits
    of a log-probability, then in the weights an update makes from them. Slower (no batching across requests): for
    runs that must equal each other bit for bit under any placement (bench.faults), not for throughput."""
    threads: int = Field(0, ge=-1)
    """`hf` on CPU: torch threads while a batch decodes; 0 = leave torch's setting, -1 = the cores other processes
    leave free, measured before each batch. On a loaded 2-core machine one thread decoded SmolLM2 about 3x faster
    than two (docs/warmstart.md); on an idle one two are 1.4-1.5x faster. Thread counts change float rounding, so a
    run that must repeat bit for bit sets run.reproducible (-1 becomes 1) or a fixed count."""
