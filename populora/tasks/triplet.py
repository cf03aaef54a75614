"""A validated task (spec 2, 18): program p, inputs i, gold outputs o, with its proto and dict forms."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from populora.config import CODE_TASK_TYPES, MATH_TASK_TYPES, TASK_TYPES
from populora.pb import common_pb2

__all__ = ["CODE_TASK_TYPES", "MATH_TASK_TYPES", "TASK_TYPES", "Triplet", "identity_triplet"]
COMPLEXITY_KEYS = ("ast_depth", "cyclomatic", "lines_of_code")


@dataclass
class Triplet:
    """One validated task. code_o / code_i: one input and one output; code_f: N of each and a message; math_w (spec
    18): the word problem in `message`, its `program` (`def solution():`), no input and one output, the answer.

    `inputs` are argument-list texts called as `f(<input>)`; `outputs` are reprs computed by the verifier
    (never by the model). `complexity` holds the keys of spec 11 when known.
    """

    task_type: str
    program: str
    inputs: list[str]
    outputs: list[str]
    message: str = ""
    teacher_id: str = ""
    task_id: str = ""
    complexity: dict[str, int] | None = field(default=None)

    def __post_init__(self) -> None:
        if self.task_type not in TASK_TYPES:
            raise ValueError(f"task_type {self.task_type!r} is not one of {list(TASK_TYPES)}")
        if self.task_type in MATH_TASK_TYPES:
            if self.inputs or len(self.outputs) != 1:
                raise ValueError(f"task {self.task_id or '?'}: a {self.task_type} task has no input and one output "
                                 f"(its answer), not {len(self.inputs)} and {len(self.outputs)}")
        elif len(self.inputs) != len(self.outputs):
            raise ValueError(f"task {self.task_id or '?'}: {len(self.inputs)} inputs but "
                             f"{len(self.outputs)} outputs; each input needs its output")

    def to_pb(self) -> common_pb2.Task:
        pb = common_pb2.Task(task_id=self.task_id, task_type=self.task_type, program=self.program,
                             inputs=list(self.inputs), outputs=list(self.outputs), message=self.message,
                             teacher_id=self.teacher_id)
        if self.complexity is not None:
            pb.complexity.CopyFrom(common_pb2.Complexity(**{k: int(self.complexity.get(k, 0))
                                                           for k in COMPLEXITY_KEYS}))
        return pb

    @classmethod
    def from_pb(cls, pb: common_pb2.Task) -> Triplet:
        comp = ({k: int(getattr(pb.complexity, k)) for k in COMPLEXITY_KEYS}
                if pb.HasField("complexity") else None)
        return cls(task_type=pb.task_type, program=pb.program, inputs=list(pb.inputs), outputs=list(pb.outputs),
                   message=pb.message, teacher_id=pb.teacher_id, task_id=pb.task_id, complexity=comp)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Triplet:
        comp = d.get("complexity")
        return cls(task_type=d["task_type"], program=d["program"], inputs=list(d["inputs"]),
                   outputs=list(d["outputs"]), message=d.get("message", ""), teacher_id=d.get("teacher_id", ""),
                   task_id=d.get("task_id", ""), complexity=dict(comp) if comp is not None else None)


IDENTITY_PROGRAM = "def f(a):\n    return a"
IDENTITY_INPUT = "'Hello world'"
IDENTITY_OUTPUT = "'Hello world'"


MATH_SEED_PROGRAM = "def solution():\n    return 3 + 4"
MATH_SEED_STATEMENT = "Ann has 3 apples and buys 4 more. How many apples does she have now?"


def identity_triplet(task_type: str) -> Triplet:
    """The seed of every buffer (spec 10): `def f(a): return a` on 'Hello world'. code_f gets the same pair
    repeated, since its tasks carry N pairs; only its program is shown to a code_f teacher. math_w (spec 18): a
    one-line word problem and the program that adds its two numbers."""
    from populora.tasks.complexity import complexity

    if task_type in MATH_TASK_TYPES:
        return Triplet(task_type=task_type, program=MATH_SEED_PROGRAM, inputs=[], outputs=["7"],
                       message=MATH_SEED_STATEMENT, task_id=f"seed-{task_type}",
                       complexity=complexity(MATH_SEED_PROGRAM))

    n = 1 if task_type != "code_f" else 2
    return Triplet(task_type=task_type, program=IDENTITY_PROGRAM, inputs=[IDENTITY_INPUT] * n,
                   outputs=[IDENTITY_OUTPUT] * n, message="Returns its argument unchanged." if n > 1 else "",
                   task_id=f"seed-{task_type}", complexity=complexity(IDENTITY_PROGRAM))
