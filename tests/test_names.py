"""The one rule for run, adapter and child ids (populora/names.py): hostile ids refused with the reason, valid ones
kept, the published pattern saying the same as the check, and every id field of a gRPC request found, nested ones
included."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from populora import names
from populora.pb import evolver_pb2, inference_pb2, league_pb2, trainer_pb2
from populora.store import StoreError, validate_adapter_id

# what fuzzing the edges from outside sent, and its relatives: every one must be refused
HOSTILE = {"a/b": "path separator '/'", "..": "starts with '.'", "../x": "starts with '.'", ".": "starts with '.'",
           "a\\b": "path separator '\\\\'", "": "must not be empty", "x" * 129: "129 characters",
           "a\x00b": "control character U+0000", "a b": "' '", " a": "' '", "é": "non-ASCII character U+00E9",
           "run\u200b": "non-ASCII character U+200B", "ｒ1": "non-ASCII character U+FF52", "-rf": "starts with '-'",
           ".hidden": "starts with '.'", "_x": "starts with '_'", "a\nb": "control character U+000A",
           "a:b": "':'", "a%2Fb": "'%'", "~x": "'~'", "a*": "'*'"}
VALID = ["r1", "a", "R", "0", "smol-popu-20261204-120000", "r1.S12c0", "run_1.T0", "a..b", "a.", "x" * 128]


@pytest.mark.parametrize("bad", list(HOSTILE), ids=[ascii(b)[:20] for b in HOSTILE])
def test_hostile_ids_are_refused_with_the_reason_and_the_rule(bad):
    with pytest.raises(names.InvalidName) as e:
        names.check_adapter_id(bad, "child_id")
    assert e.value.args[0].startswith("child_id: ") and HOSTILE[bad] in e.value.args[0], e.value
    assert names.RULE in e.value.args[0]
    with pytest.raises(StoreError, match="invalid adapter id"):  # the store's own check is the same rule
        validate_adapter_id(bad)


@pytest.mark.parametrize("good", VALID)
def test_valid_ids_are_kept(good):
    assert names.check_adapter_id(good) == good
    assert validate_adapter_id(good) == good
    if len(good) <= names.MAX_RUN_ID:
        assert names.check_run_id(good) == good


def test_a_run_id_leaves_room_for_the_adapter_ids_made_from_it():
    longest = "r" * names.MAX_RUN_ID
    assert names.check_run_id(longest) == longest
    assert names.check_adapter_id(f"{longest}.S{10**12}c{10**5}")  # coordinator/phases: <run>.<R><step>c<i>
    with pytest.raises(names.InvalidName, match="101 characters; at most 100"):
        names.check_run_id(longest + "r")


def test_optional_ids_allow_empty_only():
    assert names.check_adapter_id("", optional=True) == ""
    with pytest.raises(names.InvalidName):
        names.check_adapter_id(" ", optional=True)


@given(st.text(max_size=140))
def test_the_published_pattern_says_what_the_check_says(text):
    for max_length in (names.MAX_RUN_ID, names.MAX_ADAPTER_ID):
        # JSON Schema reads `$` as the end of the text (ECMA-262), which Python writes \Z
        published = re.compile(names.pattern(max_length).removesuffix("$") + r"\Z")
        assert bool(published.match(text)) == (names.problem(text, max_length) == "")


@given(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", fullmatch=True))
def test_every_id_the_pattern_generates_is_accepted(text):
    assert names.check_run_id(text) == text
    assert names.check_adapter_id(text) == text


@pytest.mark.parametrize("request_, where", [
    (league_pb2.CreateRunRequest(run_id="../x"), "run_id"),
    (league_pb2.RecordChildRequest(run_id="r1", child_id="c", parent_ids=["p", "a/b"]), "parent_ids[1]"),
    (league_pb2.RecordChildRequest(run_id="r1", child_id="c", parent_ids=["p"], retire_id=".."), "retire_id"),
    (league_pb2.ReportMatchesRequest(run_id="r1", matches=[league_pb2.MatchResult(teacher_id="T0"),
                                                           league_pb2.MatchResult(student_id="é")]),
     "matches[1].student_id"),
    (league_pb2.RecordComputeRequest(run_id="r1", usage=[league_pb2.Usage(adapter_id="a b")]),
     "usage[0].adapter_id"),
    (inference_pb2.GenerateRequest(requests=[inference_pb2.GenerationRequest(
        adapter={"adapter_id": "../../etc"})]), "requests[0].adapter.adapter_id"),
    (trainer_pb2.InitAdapterRequest(adapter_id="ok", init_from={"adapter_id": "."}), "init_from.adapter_id"),
    (evolver_pb2.BreedRequest(parents=[{"adapter_id": "p"}], child_id="x" * 129), "child_id"),
])
def test_every_id_field_of_a_request_is_checked(request_, where):
    with pytest.raises(names.InvalidName) as e:
        names.check_request(request_)
    assert e.value.args[0].startswith(f"{where}: "), e.value


def test_empty_ids_and_other_fields_are_left_to_the_method():
    names.check_request(league_pb2.GetEvalsRequest(run_id="r1", adapter_id=""))  # "": every adapter and the base
    names.check_request(league_pb2.ReportMatchesRequest(run_id="r1", matches=[league_pb2.MatchResult(
        match_id="r1/3/T0/code_o", teacher_id="T0", student_id="S0")]))  # a match id is not a name: it has '/'
