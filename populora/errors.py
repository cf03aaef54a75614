"""The errors a command reports as `error: ...` (exit 2) rather than a traceback, in a module that imports nothing:
the command line catches them without loading torch, which the league's and the sandbox's processes never need."""

from __future__ import annotations


class ModelError(RuntimeError):
    """A base model that cannot be loaded; the message says which and what to do."""


class StoreError(RuntimeError):
    """An artifact-store problem the user can act on: missing or corrupt version, bad id."""
