"""What the league's REST API accepts: every field bounded and checked at the edge, so a hostile request gets a 4xx
naming the field and never reaches the database. Text has no NUL and is valid UTF-8, run and adapter ids follow
populora.names (the rule every edge uses), other ids hold no control character, lengths fit the columns, integers
fit the proto fields (int32 ranks; steps and seeds within +-(2^53 - 1), what a JSON number holds exactly, inside
int64)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Path, Query
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from populora import names
from populora.http import Name, Number

MAX_BODY_BYTES = 16 * 1024 * 1024
INT32_MAX = 2**31 - 1
# Steps, seeds and sequence numbers: the integers a JSON number holds exactly (2^53 - 1, any client, a browser
# included); inside the proto's int64 and the columns' BIGINT.
JSON_INT_MAX = 2**53 - 1
MAX_BATCH = 10_000


def _clean_text(value: str) -> str:
    """Text that Postgres and SQLite store as given: valid UTF-8 (no lone surrogate); NUL is excluded by the
    schema's pattern."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid UTF-8 text (it holds a lone surrogate)") from None
    return value


NO_NUL = r"^[^\x00]*$"  # Postgres text cannot hold NUL
# other ids (match ids, operators, benchmarks): printable, no control character (NUL, tab, newline, U+0013, DEL, ...),
# as the league checks them (checks.check_id)
ID = r"^[^\x00-\x1f\x7f]*$"
CleanText = AfterValidator(_clean_text)
Role = Literal["teacher", "student", "both"]
TaskType = Literal["code_i", "code_o", "code_f", "math_w"]
Rho = Annotated[float, Field(ge=0.0, le=1.0), Number]
RunId = Name(names.MAX_RUN_ID)
AdapterId = Name(names.MAX_ADAPTER_ID)
OptionalId = Name(names.MAX_ADAPTER_ID, optional=True)
Step = Annotated[int, Field(ge=0, le=JSON_INT_MAX), Number]
Seed = Annotated[int, Field(ge=-JSON_INT_MAX, le=JSON_INT_MAX), Number]
Rank = Annotated[int, Field(ge=0, le=INT32_MAX), Number]
RunPath = Name(names.MAX_RUN_ID, Path, description="a run id")
AdapterPath = Name(names.MAX_ADAPTER_ID, Path, description="an adapter id")
AdapterQuery = Name(names.MAX_ADAPTER_ID, Query, optional=True, description="an adapter id (empty: any)")
StepQuery = Annotated[int | None, Query(ge=0, le=JSON_INT_MAX)]
BenchmarkQuery = Annotated[str, Query(max_length=64, pattern=ID, description="a benchmark (empty: every one)"),
                           CleanText]
SeqQuery = Annotated[int | None, Query(ge=0, le=JSON_INT_MAX)]
ParamName = Annotated[str, Field(min_length=1, max_length=64, pattern=ID), CleanText]
ParamValue = Annotated[float, Field(allow_inf_nan=False), Number]


def _names_schema(schema: dict) -> None:
    """A dict whose keys are constrained: pydantic writes the key pattern as `patternProperties`, which lets a key that
    breaks it through with a value of any type; say it as `propertyNames` and type every value instead."""
    pattern, value = schema.pop("patternProperties").popitem()
    schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}
    schema["additionalProperties"] = value


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")



# ---- write requests -------------------------------------------------------------------------------------------------
class RunIn(Model):
    run_id: RunId
    mode: Annotated[str, Field(max_length=32, pattern=NO_NUL), CleanText] = ""
    config_yaml: Annotated[str, Field(max_length=1_000_000, pattern=NO_NUL), CleanText] = ""


class AdapterIn(Model):
    adapter_id: AdapterId
    role: Role
    rank: Rank = 0
    created_step: Step = 0


class AdaptersIn(Model):
    adapters: list[AdapterIn] = Field(min_length=1, max_length=MAX_BATCH)


class MatchIn(Model):
    match_id: Annotated[str, Field(min_length=1, max_length=400, pattern=ID), CleanText]
    teacher_id: AdapterId
    student_id: AdapterId
    task_type: TaskType
    step: Step
    rhos: list[Rho] = Field(min_length=1, max_length=MAX_BATCH,
                            description="per task: the student's mean correctness, each in [0, 1]")


class MatchesIn(Model):
    matches: list[MatchIn] = Field(min_length=1, max_length=MAX_BATCH)


class ChildIn(Model):
    child_id: AdapterId
    role: Role
    parent_ids: list[AdapterId] = Field(min_length=1, max_length=8)
    operator: Annotated[str, Field(min_length=1, max_length=16, pattern=ID), CleanText]
    params: dict[ParamName, ParamValue] = Field(default_factory=dict, max_length=64,
                                                description="the operator's parameters (stored as JSON)",
                                                json_schema_extra=_names_schema)
    seed: Seed = 0
    step: Step = 0
    retire_id: OptionalId = ""
    rank: Rank = 0

