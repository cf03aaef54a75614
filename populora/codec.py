"""The one JSON codec of the typed records (populora.records): dataclasses to JSON-able data and back, by their type
hints, so a stored run stays readable as records gain fields (a missing field takes its default; a field marked
`omit_default` is left out while it holds its default)."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Union

from populora.tasks.buffers import BufferSet


class CodecError(ValueError):
    """A stored record does not match its type; the message names the path inside the record."""


def to_json(value: Any) -> Any:
    """A record (or anything it holds) as JSON-able data: dataclasses as objects of their fields, BufferSet as its
    own JSON form, lists and dicts element-wise."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not (f.metadata.get("omit_default") and getattr(value, f.name) == _default(f))}
    if isinstance(value, BufferSet):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_json(kind: Any, data: Any, path: str = "$") -> Any:
    """Rebuild a value of type `kind` from `to_json` output; missing fields take their defaults."""
    origin = typing.get_origin(kind)
    if kind is Any:
        return data
    if origin in (Union, types.UnionType):
        options = typing.get_args(kind)
        if data is None and type(None) in options:
            return None
        inner = [o for o in options if o is not type(None)]
        return from_json(inner[0], data, path)
    if kind is BufferSet:
        return BufferSet.from_json(data)
    if dataclasses.is_dataclass(kind):
        if not isinstance(data, dict):
            raise CodecError(f"{path}: expected an object for {kind.__name__}, got {type(data).__name__}")
        hints = _hints(kind)
        args = {}
        for f in dataclasses.fields(kind):
            if f.name in data:
                args[f.name] = from_json(hints[f.name], data[f.name], f"{path}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise CodecError(f"{path}: {kind.__name__} needs the field '{f.name}'")
        return kind(**args)
    if origin is list:
        (item,) = typing.get_args(kind)
        return [from_json(item, v, f"{path}[{i}]") for i, v in enumerate(_expect(data, list, path))]
    if origin is dict:
        _, item = typing.get_args(kind)
        return {k: from_json(item, v, f"{path}.{k}") for k, v in _expect(data, dict, path).items()}
    if kind is float:
        return float(_expect(data, (int, float), path))
    if kind in (int, str, bool):
        return _expect(data, kind, path)
    raise CodecError(f"{path}: no codec for {kind!r}")


def _expect(data: Any, kind, path: str) -> Any:
    if not isinstance(data, kind):
        raise CodecError(f"{path}: expected {getattr(kind, '__name__', kind)}, got {type(data).__name__}")
    return data
