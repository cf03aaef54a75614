"""The phases of a run (DESIGN.md "One training step"), each a function of typed records returning a typed record.

coordinator.run.step calls them in order through the journal, which stores each result before the next phase starts.
A phase talks to the services only through `run.services` (in-process objects or gRPC proxies alike) and never to
the journal, so each can be called, and unit-tested, on its own. Running a phase again after a crash is safe:
generation is seeded, league reports are idempotent by match id, a trainer update is recognised by the version it
wrote, an evolver child by its id.

One module per part of the step: `start` (step 0: the population and the seeded buffers), `play` (the games: match,
propose, validate, solve, check, rate), `update` (rewards and the TRR++ step), `evolve` and `accounting`; `run`,
`generation` and `proposals` are what they share.
"""

from coordinator.run.phases.accounting import account, seed_usage, usage
from coordinator.run.phases.evolve import evolve
from coordinator.run.phases.generation import Generation, generate
from coordinator.run.phases.play import (
           check,
           match,
           propose,
           propose_slots,
           rate,
           solve,
           student_requests,
           validate,
)
from coordinator.run.phases.proposals import Slot, teacher_requests
from coordinator.run.phases.run import Run
from coordinator.run.phases.start import init, seed
from coordinator.run.phases.update import rollouts, update

__all__ = ["Generation", "Run", "Slot", "account", "check", "evolve", "generate", "init", "match", "propose",
           "propose_slots", "rate", "rollouts", "seed", "seed_usage", "solve", "student_requests", "teacher_requests",
           "update", "usage", "validate"]
