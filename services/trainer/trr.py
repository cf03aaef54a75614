"""The TRR++ policy-gradient update of spec §5 (docs/algorithm.md), for one or several LoRA adapters at once.

Read top to bottom: rollouts -> advantages per (task type, role) group -> rows packed into micro-batches under a
token budget -> log pi of every response token under the row's adapter, at the temperature it was sampled at (spec
16) -> loss -> backward (gradients accumulate over micro-batches) -> per-adapter grad clip and AdamW step.

One pass may carry rows of several adapters (`batched`): each row goes through its own adapter, every adapter's
loss is normalised by its own token count, and the total loss is the sum of the per-adapter losses. Since an
adapter's parameters only touch its own rows, d(total)/d(theta_a) = d(loss_a)/d(theta_a): the gradients are the
ones the adapters would get one by one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from populora.adapters import AdapterHost
from populora.records import UpdateStats
from services.trainer.logprobs import DEFAULT_CHUNK_TOKENS, token_logprobs
from services.trainer.memory import MB, AdapterShape, MemoryLimitError, ModelShape, pass_bytes, training_bytes

log = logging.getLogger(__name__)

@dataclass
class Rollout:
    """One trajectory: a prompt, the adapter's response, its scalar reward, and its group key (spec §4-5)."""

    prompt: list[int]
    response: list[int]
    reward: float
    task_type: str
    role: str
    old_logprobs: list[float] | None = None
    temperature: float = 1.0  # the response was sampled at it: pi = softmax(logits / T) (spec 16)
    truncated_fraction: float = 0.0  # share of its tokens drawn from a truncated top-p nucleus (reported only)


@dataclass
class TrrSettings:
    """The knobs of one update (from `cfg.trainer`, spec §5)."""

    grad_clip: float = 1.0
    entropy_coef: float = 0.0
    ppo_clip: float = 0.2
    epochs: int = 1
    micro_batch_tokens: int = 4096
    adv_eps: float = 1e-6
    logprob_chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    activation_checkpointing: bool = True
    memory_limit_mb: int = 0  # 0: no limit; else micro-batches the memory model predicts over it are split


@dataclass
class UpdateJob:
    """One adapter's share of an update: its rollouts, its trainable parameters and its optimizer."""

    adapter: str
    rollouts: list[Rollout]
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer


# ---------------------------------------------------------------- advantages (spec §5)

def group_advantages(rewards: Sequence[float], groups: Sequence[tuple[str, str]], eps: float = 1e-6) -> torch.Tensor:
    """A_i = (r_i - mean_g) / (std_g + eps) inside each group g = (task type, role) (spec §5).

    std is the population standard deviation of the group. A group of one, or of equal rewards, gets A = 0: it
    says nothing about which response was better.
    """
    r = torch.tensor(list(rewards), dtype=torch.float64)
    adv = torch.zeros_like(r)
    for g in set(groups):
        idx = torch.tensor([i for i, key in enumerate(groups) if key == g])
        rg = r[idx]
        if bool((rg == rg[0]).all()):  # exactly 0, not the rounding error of (r - mean) / eps
            continue
        adv[idx] = (rg - rg.mean()) / (rg.std(unbiased=False) + eps)
    return adv.float()


# ---------------------------------------------------------------- rows and micro-batches

@dataclass
class Row:
    """One rollout as a training row: prompt + response ids; each response token weighs 1 / N_adapter."""

    job: int
    ids: list[int]
    n_prompt: int
    advantage: float
    inv_tokens: float
    old_logprobs: torch.Tensor | None = None
    temperature: float = 1.0

    @property
    def n_response(self) -> int:
        return len(self.ids) - self.n_prompt


@dataclass
class MicroBatch:
    rows: list[Row]
    adapters: list[str]
    input_ids: torch.Tensor  # (B, T), right-padded
    attention_mask: torch.Tensor  # (B, T)
    pred_rows: torch.Tensor  # (N,) row of each response token
    pred_pos: torch.Tensor  # (N,) position whose hidden state predicts it (t predicts t+1)
    targets: torch.Tensor  # (N,) the response token ids
    advantages: torch.Tensor  # (N,) the row's A on each of its tokens
    inv_tokens: torch.Tensor  # (N,) 1 / N_adapter
    token_job: torch.Tensor  # (N,) index of the job each token belongs to
    row_slices: list[slice] = field(default_factory=list)  # each row's tokens inside the (N,) vectors
    temperature: torch.Tensor | None = None  # (N,) the row's sampling temperature on each token; None: all 1


def make_rows(jobs: Sequence[UpdateJob], eps: float) -> tuple[list[Row], list[torch.Tensor]]:
    """Every job's rollouts as rows, with group-normalised advantages; also each job's advantage vector."""
    rows, advantages = [], []
    for j, job in enumerate(jobs):
        adv = group_advantages([r.reward for r in job.rollouts], [(r.task_type, r.role) for r in job.rollouts], eps)
        n_tokens = sum(len(r.response) for r in job.rollouts)
        for r, a in zip(job.rollouts, adv.tolist(), strict=True):
            old = torch.tensor(r.old_logprobs, dtype=torch.float32) if r.old_logprobs else None
            rows.append(Row(j, list(r.prompt) + list(r.response), len(r.prompt), a, 1.0 / n_tokens, old,
                            r.temperature))
        advantages.append(adv)
    return rows, advantages


def pack(rows: list[Row], budget: int) -> list[list[Row]]:
    """Rows into micro-batches whose padded size (rows x longest row) stays within `budget` tokens.

    Longest rows first, so rows of similar length share a batch and little is padding. A row longer than the budget
    runs alone (a memory budget cannot split one sequence; failing a long run over one long rollout would be worse).
    """
    batches: list[list[Row]] = []
    current: list[Row] = []
    for row in sorted(rows, key=lambda r: len(r.ids), reverse=True):
        if len(row.ids) > budget:
            log.warning("a rollout of %d tokens (prompt + response) is over trainer.micro_batch_tokens=%d: it runs "
                        "alone in its micro-batch", len(row.ids), budget)
        longest = len(current[0].ids) if current else len(row.ids)
        if current and (len(current) + 1) * longest > budget:
            batches.append(current)
            current = []
        current.append(row)
    if current:
        batches.append(current)
    return batches


def fit_memory(batches: list[list[Row]], policy: AdapterHost, jobs: Sequence[UpdateJob], settings: TrrSettings,
               reserved: int = 0) -> list[list[Row]]:
    """The micro-batches, each one the memory model (services/trainer/memory.py) predicts over
    `settings.memory_limit_mb` packed again at half its padded tokens until it fits. A row that cannot fit alone is
    refused (MemoryLimitError) before any pass runs. `reserved`: bytes already held for the update."""
    if not settings.memory_limit_mb:
        return batches
    limit = settings.memory_limit_mb * MB
    model = ModelShape.of(policy.causal_lm)
    adapters = [AdapterShape.of(job.params, model.layers, bool(job.optimizer.state)) for job in jobs]
    rank = max(a.rank_per_layer for a in adapters)

    def predicted(rows: list[Row]) -> int:
        peak = pass_bytes(model, len(rows), max(len(r.ids) for r in rows), sum(r.n_response for r in rows), rank,
                          settings.logprob_chunk_tokens, settings.activation_checkpointing, settings.entropy_coef > 0)
        return reserved + training_bytes(adapters, peak, policy.device.type == "cpu")

    fitted, todo = [], list(batches)
    while todo:
        rows = todo.pop(0)
        need = predicted(rows)
        if need <= limit:
            fitted.append(rows)
            continue
        if len(rows) == 1:
            raise MemoryLimitError(
                f"a rollout of {len(rows[0].ids)} tokens ({rows[0].n_response} of them response) needs "
                f"{need / MB:.0f} MiB for its update by the memory model, over trainer.memory_limit_mb="
                f"{settings.memory_limit_mb} (of it, {(reserved + training_bytes(adapters, 0, False)) / MB:.0f} "
                f"MiB are the adapters' snapshot, gradients and AdamW step); raise the limit, turn "
                f"trainer.activation_checkpointing on, lower trainer.logprob_chunk_tokens "
                f"({settings.logprob_chunk_tokens}), or send shorter rollouts")
        width = max(len(r.ids) for r in rows)
        smaller = pack(rows, len(rows) * width // 2)  # >= width: every row fits alone, so this always splits
        log.info("a micro-batch of %d rows x %d tokens is predicted to need %.0f MiB, over trainer.memory_limit_mb="
                 "%d: split into %d", len(rows), width, need / MB, settings.memory_limit_mb, len(smaller))
        todo[:0] = smaller
    return fitted


def collate(rows: list[Row], adapter_names: list[str], device: torch.device) -> MicroBatch:
    """Right-pad rows into (B, T) tensors and index every response token they hold.

    Rows of one adapter are put next to each other, so the batched LoRA layer works on slices, not gathers.
    """
    rows = sorted(rows, key=lambda r: r.job)
    width = max(len(r.ids) for r in rows)
    input_ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    pred_rows, pred_pos, adv, inv_tokens, token_job, slices, temperature = [], [], [], [], [], [], []
    start = 0
    for b, r in enumerate(rows):
        input_ids[b, : len(r.ids)] = torch.tensor(r.ids)
        mask[b, : len(r.ids)] = 1
        n = r.n_response
        pred_rows += [b] * n
        pred_pos += range(r.n_prompt - 1, len(r.ids) - 1)
        adv += [r.advantage] * n
        inv_tokens += [r.inv_tokens] * n
        token_job += [r.job] * n
        temperature += [r.temperature] * n
        slices.append(slice(start, start + n))
        start += n
    return MicroBatch(rows, [adapter_names[r.job] for r in rows], input_ids.to(device), mask.to(device),
                      torch.tensor(pred_rows, device=device), torch.tensor(pred_pos, device=device),
                      input_ids[torch.tensor(pred_rows), torch.tensor(pred_pos) + 1].to(device),
                      torch.tensor(adv, device=device), torch.tensor(inv_tokens, device=device),
                      torch.tensor(token_job, device=device), slices,
                      # T = 1 everywhere: no division, so those log-probabilities stay bit for bit what they were
                      None if all(r.temperature == 1.0 for r in rows) else torch.tensor(temperature, device=device))


# ---------------------------------------------------------------- log pi of the response tokens

def response_logprobs(policy: AdapterHost, mb: MicroBatch, with_entropy: bool,
                      chunk: int = DEFAULT_CHUNK_TOKENS) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(y_t | x, y_<t) of every response token (N,), and the entropy of pi at that position (N,), with pi the
    distribution the row was sampled from: softmax(logits / T) at the row's temperature (spec 16).

    Only response positions go through the LM head, `chunk` tokens at a time in the forward and the backward pass
    (services/trainer/logprobs.py), so the (tokens x vocab) logits never exist all at once: with a 150k vocabulary
    and a small model they would be the largest tensors of the update by far.
    """
    hidden = policy.hidden_states(mb.adapters, mb.input_ids, mb.attention_mask)  # (B, T, H)
    h = hidden[mb.pred_rows, mb.pred_pos]  # (N, H)
    return token_logprobs(policy.output_layer(), h, mb.targets, with_entropy, chunk, mb.temperature)


# ---------------------------------------------------------------- the loss (spec §5)

def token_objective(logp: torch.Tensor, old_logp: torch.Tensor | None, adv: torch.Tensor,
                    clip: float) -> torch.Tensor:
    """Per-token objective to maximise: A · log pi on-policy; PPO's min(rho A, clip(rho, 1±eps) A) otherwise.

    rho = pi / pi_old. At the first epoch pi_old = pi (detached): rho = 1 and the gradient equals that of A log pi.
    When pi_old is the behaviour policy mu_b that sampled the rollout (overlapped steps), this is the
    bounded-staleness objective of spec 16: r = exp(log pi_v - log mu_b), - min(r A, clip(r, 1 - eps, 1 + eps) A).
    """
    if old_logp is None:
        return adv * logp
    ratio = torch.exp(logp - old_logp)
    return torch.minimum(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)


def ratio_stats(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, clip: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token: |r - 1| and whether the clip cut r off (the clipped term won the min, so the token gives no
    gradient), r = exp(log pi_v - log mu_b) of spec 16."""
    ratio = torch.exp(logp.detach() - old_logp)
    cut = ((adv > 0) & (ratio > 1 + clip)) | ((adv < 0) & (ratio < 1 - clip))
    return (ratio - 1).abs(), cut.to(ratio.dtype)


def trr_update(policy: AdapterHost, jobs: Sequence[UpdateJob], settings: TrrSettings,
               device: torch.device, reserved_bytes: int = 0) -> list[UpdateStats]:
    """One TRR++ update of every job's adapter, all rows in shared passes (spec §5).

    loss_a = - (1/N_a) sum_{t in responses of a} A_t log pi_a(y_t) - c_ent (1/N_a) sum_t H_t,
    summed over adapters, accumulated over micro-batches, then per adapter: clip ||g_a|| to grad_clip, AdamW step.
    With epochs > 1 the later epochs use PPO's clipped ratio against the log-probs of the first epoch. Rollouts
    that carry `old_logprobs` (the behaviour policy's, recorded at generation: overlapped steps) use the clipped
    ratio against those from the first epoch on: the bounded-staleness objective of spec 16.
    `reserved_bytes`: memory the caller holds for this update already (the pool's snapshot), for the memory limit.
    """
    start = time.perf_counter()
    adapters = [job.adapter for job in jobs]
    rows, advantages = make_rows(jobs, settings.adv_eps)
    if settings.entropy_coef == 0:  # A = 0 rows add exactly nothing to loss or gradient: no pass for them
        rows = [r for r in rows if r.advantage != 0]
    batches = fit_memory(pack(rows, settings.micro_batch_tokens), policy, jobs, settings, reserved_bytes)
    mean_abs_advantage = [float(adv.abs().mean()) for adv in advantages]
    loss, grad_norm = [0.0] * len(jobs), [0.0] * len(jobs)  # reported from the first epoch
    use_old = settings.epochs > 1 or any(r.old_logprobs is not None for r in rows)
    behaviour = any(r.old_logprobs is not None for r in rows)  # ratios against mu_b are reported (spec 16)
    dev_sum, cut_sum, n_ratio = (torch.zeros(len(jobs), dtype=torch.float64) for _ in range(3))
    with policy.layer_checkpointing(settings.activation_checkpointing):  # one layer's activations at a time
        for epoch in range(settings.epochs):
            losses = torch.zeros(len(jobs), dtype=torch.float64)
            for rows_mb in batches:
                mb = collate(rows_mb, adapters, device)
                logp, entropy = response_logprobs(policy, mb, settings.entropy_coef > 0, settings.logprob_chunk_tokens)
                old = _old_logprobs(mb, logp) if use_old else None
                bonus = settings.entropy_coef * mb.inv_tokens * entropy
                per_token = -mb.inv_tokens * token_objective(logp, old, mb.advantages, settings.ppo_clip) - bonus
                per_token.sum().backward()
                # reported: the on-policy loss of spec §5 (PPO's surrogate at rho = 1 has the same gradient, not value)
                reported = -mb.inv_tokens * mb.advantages * logp.detach() - bonus.detach()
                losses.index_add_(0, mb.token_job.cpu(), reported.double().cpu())
                if behaviour and epoch == 0:
                    dev, cut = ratio_stats(logp, old, mb.advantages, settings.ppo_clip)
                    jobs_of = mb.token_job.cpu()
                    dev_sum.index_add_(0, jobs_of, dev.double().cpu())
                    cut_sum.index_add_(0, jobs_of, cut.double().cpu())
                    n_ratio.index_add_(0, jobs_of, torch.ones_like(dev, dtype=torch.float64).cpu())
            for j, job in enumerate(jobs):
                for p in job.params:  # an adapter whose rows all had A = 0 still takes its (zero-gradient) Adam step
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                norm = torch.nn.utils.clip_grad_norm_(job.params, settings.grad_clip)
                job.optimizer.step()
                job.optimizer.zero_grad(set_to_none=True)
                if epoch == 0:
                    loss[j], grad_norm[j] = float(losses[j]), float(norm)
    seconds = time.perf_counter() - start
    return [UpdateStats(loss=loss[j], grad_norm=grad_norm[j], mean_abs_advantage=mean_abs_advantage[j],
                        tokens=sum(len(r.response) for r in job.rollouts), seconds=seconds, rollouts=len(job.rollouts),
                        ratio_dev=float(dev_sum[j] / max(n_ratio[j], 1)),
                        clipped_fraction=float(cut_sum[j] / max(n_ratio[j], 1)),
                        truncated_fraction=truncated_share(job.rollouts))
            for j, job in enumerate(jobs)]


def truncated_share(rollouts: Sequence[Rollout]) -> float:
    """The share of the response tokens drawn from a top-p nucleus that left out some mass (spec 16), over every
    response token of the update: how far sampling was from the policy pi the update trains."""
    tokens = sum(len(r.response) for r in rollouts)
    return sum(r.truncated_fraction * len(r.response) for r in rollouts) / max(tokens, 1)


def _old_logprobs(mb: MicroBatch, logp: torch.Tensor) -> torch.Tensor:
    """pi_old for PPO: the rollout's own log-probs where it carries them, else the row's log-probs the first time
    it is seen (epoch 0), kept on the row for the later epochs."""
    for row, sl in zip(mb.rows, mb.row_slices, strict=True):
        if row.old_logprobs is None:
            row.old_logprobs = logp[sl].detach().cpu()
    return torch.cat([row.old_logprobs for row in mb.rows]).to(logp.device)
