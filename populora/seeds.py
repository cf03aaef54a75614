"""The one way to derive a seed from what identifies a random choice (run seed, run id, step, adapter id, ...)."""

from __future__ import annotations

import hashlib


def derive_seed(*parts: object) -> int:
    """A stable 63-bit seed from any parts: the same parts give the same seed in every process and on every machine
    (Python's hash() does not), so a phase that runs again after a crash draws the same numbers."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1
