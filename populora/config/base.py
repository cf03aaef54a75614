"""What every configuration section shares: the project's vocabulary, the config error and the section base."""

from pydantic import BaseModel, ConfigDict

CODE_TASK_TYPES = ("code_i", "code_o", "code_f")  # spec 2: the default mix of a run
MATH_TASK_TYPES = ("math_w",)  # spec 18: checked by the math checker
TASK_TYPES = CODE_TASK_TYPES + MATH_TASK_TYPES  # every type a run may play
ROLES = ("teacher", "student", "both")  # spec 1; "both": the baseline's single adapter
ALL_TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
MAX_RANK = 512  # the largest LoRA rank a member may hold: the config, the trainer and the evolver all bound by it
OPERATORS = ("M1", "M2", "M3", "M4", "R1", "X1", "X2", "X3", "X4")  # spec 9; R1: the rank change of "Mixed ranks"


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the field and what is allowed."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


def check_ranks(ranks: list[int]) -> list[int]:
    """A list of LoRA ranks, each within 1..MAX_RANK (the validators of every rank list)."""
    bad = [r for r in ranks if not 1 <= r <= MAX_RANK]
    if bad:
        raise ValueError(f"ranks {bad} are outside 1..{MAX_RANK}")
    return ranks
