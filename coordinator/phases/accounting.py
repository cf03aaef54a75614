"""The compute a step spent (spec 14), from its records, and its record in the league."""

from __future__ import annotations

from collections import Counter

from coordinator.phases.run import Run
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


def usage(proposed: Proposed, validated: Validated, solved: Solved, checked: Checked,
          batch: dict[str, list[Rollout]], updated: Updated) -> Accounted:
    """The compute of one step (spec 14), from its records: tokens each adapter generated (its proposals or
    attempts) and was trained on (prompt and response of its rollouts, for the adapters that were updated), and the
    sandbox jobs of validation and checking."""
    generated: Counter = Counter()
    for p in proposed.proposals:
        generated[p.teacher] += len(p.response_token_ids)
    for a in solved.attempts:
        generated[a.student] += len(a.response_token_ids)
    trained = Counter({adapter_id: sum(len(r.prompt_token_ids) + len(r.response_token_ids) for r in rows)
                       for adapter_id, rows in batch.items() if adapter_id in updated.stats})
    adapters = {a: Usage(generated[a], trained[a]) for a in sorted(set(generated) | set(trained))}
    total = sum(adapters.values(), Usage()) + Usage(sandbox_jobs=validated.sandbox_jobs + checked.sandbox_jobs)
    return Accounted(adapters, total)


def seed_usage(warmed: WarmStarted, seeded: Seeded) -> Accounted:
    """The compute of step 0: the warm start's fit (counted whether this run fitted it or found it cached: every
    run that starts from it pays for it, so two arms compare alike) and the seeding proposals with their
    validation, written by the warm adapter or the bare base model ("base")."""
    adapters = {}
    if warmed.tokens:
        adapters["warmstart"] = Usage(trained_tokens=warmed.tokens)
    if seeded.generated_tokens:
        adapters[warmed.adapter_id or "base"] = Usage(generated_tokens=seeded.generated_tokens)
    return Accounted(adapters, sum(adapters.values(), Usage()) + Usage(sandbox_jobs=seeded.sandbox_jobs))


def account(run: Run, step: int, spent: Accounted) -> Accounted:
    """Record what the step spent in the league (per adapter, and the sandbox jobs at run level)."""
    rows = [league_pb2.Usage(adapter_id=a, generated_tokens=u.generated_tokens, trained_tokens=u.trained_tokens)
            for a, u in spent.adapters.items()]
    rows.append(league_pb2.Usage(adapter_id="", sandbox_jobs=spent.total.sandbox_jobs))
    run.services.league.RecordCompute(league_pb2.RecordComputeRequest(run_id=run.run_id, step=step, usage=rows))
    return spent
