"""Which held-out templates share behaviour with the warm start's templates or the seed (spec 13): a held-out template
whose programs give the same outputs on the same inputs as some warm-start program (or the identity seed of the
buffers) is no test of what self-play taught, since the warm start already showed that function, only written another
way (`reverse_rec` is `s[::-1]`, which `string_op` teaches). Its families (template x task type) are left out of the
`heldout` headline and listed as removed.

Every program runs in the sandbox (`Execute`, through populora.evals.scoring.execute), and the outputs are compared
on this host: each held-out program on inputs drawn by its own template, each warm-start program on the same inputs.
A warm-start program that raises, or runs past the sandbox's limit, on an input gives no output there, so it does not
share that program's behaviour.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass, field
from typing import Any

from populora.evals.scoring import execute
from populora.pb import sandbox_pb2
from populora.tasks.seed_templates import HELDOUT_TEMPLATES, TEMPLATES, WARM_TEMPLATES
from populora.tasks.triplet import IDENTITY_PROGRAM

SEED_NAME = "identity seed"  # the buffers' seed program (populora.tasks.triplet), compared like a warm template
# What a call that raised returns instead of a value: no program's output is this string's repr.
_FAILED = "\x00populora-overlap-failed\x00"
_HELPER = ("\n\ndef _overlap_outputs(thunks):\n    out = []\n    for thunk in thunks:\n        try:\n"
           "            out.append(repr(thunk()))\n        except BaseException:\n"
           f"            out.append({_FAILED!r})\n    return out\n")


@dataclass(frozen=True)
class Overlap:
    """The result: per held-out template the warm templates (or the seed) one of whose programs gave the same outputs
    as one of its programs on every input drawn for that program, and how much was compared."""

    shared: dict[str, list[str]]  # held-out template -> matching templates (empty: none)
    programs: dict[str, int]  # held-out template -> its programs compared
    inputs: int  # inputs per held-out program
    warm_programs: int  # distinct warm-start programs compared (the seed included)
    failed_jobs: int  # jobs that gave no result (timeout, sandbox error): their pairs count as not shared
    examples: dict[str, tuple[str, str]] = field(default_factory=dict)  # held-out template -> (its, the warm) program

    @property
    def removed(self) -> list[str]:
        """The held-out templates that share behaviour, in the split's order."""
        return [t for t in HELDOUT_TEMPLATES if self.shared.get(t)]


def _draw_programs(name: str, n: int, seed: int) -> list[tuple[str, Any]]:
    """Up to n distinct programs of a template (its constants drawn from a seeded generator) with their drafts."""
    rng = random.Random(f"populora-overlap/{name}/{seed}")
    seen: dict[str, Any] = {}
    for _ in range(8 * n):
        draft = TEMPLATES[name].draw(rng)
        seen.setdefault(draft.program, draft)
        if len(seen) == n:
            break
    return list(seen.items())


def _inputs(draft: Any, n: int, rng: random.Random) -> list[str]:
    out: list[str] = []
    for _ in range(20 * n):
        text = draft.draw_input(rng)
        if text not in out:
            out.append(text)
        if len(out) == n:
            break
    return out


def _job(job_id: str, program: str, inputs: list[str], timeout_s: float) -> sandbox_pb2.ExecJob:
    call = "_overlap_outputs([" + ", ".join(f"lambda: f({i})" for i in inputs) + "])"
    return sandbox_pb2.ExecJob(job_id=job_id, program=program + _HELPER, call=call, timeout_s=timeout_s)


def _outputs(result: sandbox_pb2.ExecResult | None, n: int) -> list[Any] | None:
    """The values of one job's calls, read on this host (a repr that is no literal stays its text); None without a
    result."""
    if result is None or result.status != "ok":
        return None
    try:
        reprs = ast.literal_eval(result.value_repr)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(reprs, list) or len(reprs) != n:
        return None
    out = []
    for text in reprs:
        if text == _FAILED:
            out.append(_FAILED)
            continue
        try:
            out.append(ast.literal_eval(text))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            out.append(("repr", text))
    return out


def shared_behaviour(sandbox: Any, *, seed: int = 0, heldout_programs: int = 8, warm_programs: int = 48,
                     inputs: int = 10, timeout_s: float = 5.0, warm_templates: tuple[str, ...] = WARM_TEMPLATES
                     ) -> Overlap:
    """Compare every held-out template with every warm-start template and the identity seed (module docstring).

    Per held-out template, `heldout_programs` distinct programs, each with `inputs` distinct inputs from its own
    drawer; per warm template (of `warm_templates`) up to `warm_programs` distinct programs (its constants and
    operators drawn), and the identity seed. A held-out
    template shares behaviour with a warm one when some pair of their programs gives equal outputs (compared as
    values, read from their reprs) on every input of the held-out program. Deterministic in `seed`.
    """
    rng = random.Random(f"populora-overlap-inputs/{seed}")
    held: list[tuple[str, str, list[str]]] = []  # (template, program, inputs)
    for name in HELDOUT_TEMPLATES:
        for program, draft in _draw_programs(name, heldout_programs, seed):
            held.append((name, program, _inputs(draft, inputs, rng)))
    warm = [(name, program) for name in warm_templates for program, _ in _draw_programs(name, warm_programs, seed)]
    warm.append((SEED_NAME, IDENTITY_PROGRAM))
    jobs = [_job(f"h{i}", program, ins, timeout_s) for i, (_, program, ins) in enumerate(held)]
    # one job per (warm program, held-out template): a warm program that runs too long on one template's inputs
    # (fib on a Collatz start of 40) then loses only that template's comparison
    per_template = {name: [(i, ins) for i, (n, _, ins) in enumerate(held) if n == name] for name in HELDOUT_TEMPLATES}
    pairs = [(w, name) for w in range(len(warm)) for name in HELDOUT_TEMPLATES if per_template[name]]
    for k, (w, name) in enumerate(pairs):
        jobs.append(_job(f"w{k}", warm[w][1], [x for _, ins in per_template[name] for x in ins], timeout_s))
    results = execute(sandbox, jobs)
    failed = sum(r is None or r.status != "ok" for r in results)
    expected = [_outputs(r, len(ins)) for r, (_, _, ins) in zip(results, held)]
    shared: dict[str, list[str]] = {name: [] for name in HELDOUT_TEMPLATES}
    examples: dict[str, tuple[str, str]] = {}
    for (w, name), result in zip(pairs, results[len(held):]):
        w_name, w_program = warm[w]
        got = _outputs(result, sum(len(ins) for _, ins in per_template[name]))
        if got is None or w_name in shared[name]:
            continue
        at = 0
        for i, ins in per_template[name]:
            want = expected[i]
            # a held-out program that fails on its own inputs has nothing to compare (a template bug)
            if want is not None and _FAILED not in want and got[at:at + len(ins)] == want:
                shared[name].append(w_name)
                examples.setdefault(name, (held[i][1], w_program))
                break
            at += len(ins)
    programs = {name: sum(h[0] == name for h in held) for name in HELDOUT_TEMPLATES}
    return Overlap(shared=shared, programs=programs, inputs=inputs, warm_programs=len(warm), failed_jobs=failed,
                   examples=examples)
