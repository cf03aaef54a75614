"""Held-out templates that share behaviour with the warm start (populora/evals/overlap.py), run in a real sandbox."""

from __future__ import annotations

from populora.evals.overlap import SEED_NAME, shared_behaviour


def test_the_recursive_reversal_is_the_warm_starts_slice_and_nothing_else_is(sandbox):
    """`reverse_rec` reverses a word recursively; the warm start's `string_op` draws `s[::-1]` among its bodies, so
    on every word they agree and reverse_rec's families are no test of self-play. The other held-out templates
    (alternating case, windows, inversion, gcd, Collatz) agree with none of these templates on all their inputs, and
    the identity seed agrees with nothing."""
    got = shared_behaviour(sandbox, warm_programs=24, heldout_programs=3, inputs=6,
                           warm_templates=("string_op", "arithmetic", "dict_op"))
    assert got.removed == ["reverse_rec"]
    assert got.shared["reverse_rec"] == ["string_op"]
    assert all(not v for k, v in got.shared.items() if k != "reverse_rec")
    assert all(SEED_NAME not in v for v in got.shared.values())
    its, warm = got.examples["reverse_rec"]
    assert "f(s[1:])" in its or "f(word[1:])" in its
    assert "[::-1]" in warm
    assert got.inputs == 6 and all(n >= 1 for n in got.programs.values())
