"""The compute a step spent (spec 14), from its records, and its record in the league.

FLOPs after Kaplan et al. (populora/analysis/flops.py): 2N per token a forward pass reads (the prompt pass before
generation and every generated token), 6N per trained token, N = the base model's parameters plus the adapter's
(coordinator/run/modelsize.py). A row the update skips (its (task type, role) group has equal rewards, so zero
advantage, spec 5) costs no pass and is not charged; with an entropy bonus every row is trained and charged.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping

from coordinator.run.modelsize import ModelSize
from coordinator.run.phases.run import Run
from populora.analysis.flops import TokenCounts, phase_flops
from populora.config import Config
from populora.pb import league_pb2
from populora.records import (
    Accounted,
    Checked,
    Proposed,
    Rollout,
    Seeded,
    Solved,
    Updated,
    Usage,
    Validated,
    WarmStarted,
)

# Phases not charged to the training budget (spec 14): both arms share the warm start.
OFF_BUDGET = frozenset({"warm_start"})


def charged_rows(rows: list[Rollout], entropy_coef: float = 0.0) -> list[Rollout]:
    """The rows an update passes over: those of (task type, role) groups whose rewards differ (spec 5: a group of
    equal rewards has zero advantage and the trainer skips it), or every row when an entropy bonus makes even a
    zero-advantage row contribute."""
    if entropy_coef:
        return list(rows)
    groups: dict[tuple[str, str], set[float]] = defaultdict(set)
    for r in rows:
        groups[(r.task_type, r.role)].add(r.reward)
    return [r for r in rows if len(groups[(r.task_type, r.role)]) > 1]


def _flops(tokens: TokenCounts, n: int) -> int:
    return phase_flops({"x": tokens}, n).total


def usage(proposed: Proposed, validated: Validated, solved: Solved, checked: Checked,
          batch: dict[str, list[Rollout]], updated: Updated, cfg: Config, size: ModelSize,
          ranks: Mapping[str, int] | None = None) -> Accounted:
    """The compute of one step (spec 14), from its records: per adapter the prompt tokens it read and the tokens it
    generated (its proposals or attempts), and the tokens it was trained on (prompt and response of the charged
    rows, times the update's epochs, for the adapters that were updated); per phase the same; the sandbox jobs of
    validation and checking. Each adapter's tokens are charged at its own N, the base's parameters plus those of its
    rank (`ranks`: adapter id -> rank; None = every adapter at lora.rank), and a phase's FLOPs are its adapters'."""
    def n_of(adapter_id: str) -> int:
        return size.with_rank(ranks[adapter_id]) if ranks is not None else size.with_adapter

    prompt: Counter = Counter()
    generated: Counter = Counter()
    phase: dict[str, TokenCounts] = {}
    phase_flops: dict[str, int] = {}
    for name, items in (("propose", [(p.teacher, p) for p in proposed.proposals]),
                        ("solve", [(a.student, a) for a in solved.attempts])):
        own: dict[str, TokenCounts] = {}
        for adapter_id, x in items:
            prompt[adapter_id] += len(x.prompt_token_ids)
            generated[adapter_id] += len(x.response_token_ids)
            t = own.get(adapter_id, TokenCounts())
            own[adapter_id] = TokenCounts(prompt=t.prompt + len(x.prompt_token_ids),
                                          generated=t.generated + len(x.response_token_ids))
        phase[name] = TokenCounts(prompt=sum(len(x.prompt_token_ids) for _, x in items),
                                  generated=sum(len(x.response_token_ids) for _, x in items))
        phase_flops[name] = sum(_flops(t, n_of(a)) for a, t in own.items())
    epochs = cfg.trainer.epochs
    trained = Counter({adapter_id: epochs * sum(len(r.prompt_token_ids) + len(r.response_token_ids)
                                                for r in charged_rows(rows, cfg.trainer.entropy_coef))
                       for adapter_id, rows in batch.items() if adapter_id in updated.stats})
    phase["update"] = TokenCounts(trained=sum(trained.values()))
    phase_flops["update"] = sum(_flops(TokenCounts(trained=t), n_of(a)) for a, t in trained.items())
    adapters = {}
    for a in sorted(set(generated) | set(trained)):
        t = TokenCounts(prompt=prompt[a], generated=generated[a], trained=trained[a])
        adapters[a] = Usage(generated[a], trained[a], 0, prompt[a], _flops(t, n_of(a)))
    phases = {k: Usage(t.generated, t.trained, 0, t.prompt, phase_flops[k]) for k, t in phase.items()}
    total = sum(phases.values(), Usage()) + Usage(sandbox_jobs=validated.sandbox_jobs + checked.sandbox_jobs)
    return Accounted(adapters, total, phases, validated.sandbox_cpu_seconds + checked.sandbox_cpu_seconds)


def seed_usage(warmed: WarmStarted, seeded: Seeded, size: ModelSize) -> Accounted:
    """The compute of step 0: the warm start's fit (counted whether this run fitted it or found it cached: every
    run that starts from it pays for it, so two arms compare alike; off the training budget, spec 14) and the
    seeding proposals with their validation, written by the warm adapter or the bare base model ("base", N = the
    base's parameters only). Seeding's prompt pass is not in its records and is not counted."""
    adapters, phases = {}, {}
    if warmed.tokens:
        t = TokenCounts(trained=warmed.tokens)
        adapters["warmstart"] = phases["warm_start"] = Usage(trained_tokens=warmed.tokens,
                                                             flops=_flops(t, size.with_adapter))
    if seeded.generated_tokens:
        n = size.with_adapter if warmed.adapter_id else size.base
        t = TokenCounts(generated=seeded.generated_tokens)
        adapters[warmed.adapter_id or "base"] = phases["seeding"] = Usage(generated_tokens=seeded.generated_tokens,
                                                                          flops=_flops(t, n))
    total = sum(phases.values(), Usage()) + Usage(sandbox_jobs=seeded.sandbox_jobs)
    return Accounted(adapters, total, phases, seeded.sandbox_cpu_seconds)


def budget_flops(spent: Accounted) -> int:
    """The FLOPs of a step charged to the training budget: every phase but the warm start (spec 14)."""
    return spent.total.flops - sum(u.flops for k, u in spent.phases.items() if k in OFF_BUDGET)


def account(run: Run, step: int, spent: Accounted) -> Accounted:
    """Record what the step spent in the league (per adapter, and the sandbox jobs at run level)."""
    rows = [league_pb2.Usage(adapter_id=a, generated_tokens=u.generated_tokens, trained_tokens=u.trained_tokens)
            for a, u in spent.adapters.items()]
    rows.append(league_pb2.Usage(adapter_id="", sandbox_jobs=spent.total.sandbox_jobs))
    run.services.league.RecordCompute(league_pb2.RecordComputeRequest(run_id=run.run_id, step=step, usage=rows))
    return spent
