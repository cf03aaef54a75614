"""Host side of the result channel: parse the child's one frame and rebuild plain values by exact type."""

from __future__ import annotations

import json
from typing import Any

from services.sandbox.jail_runtime import MAGIC

_HEADER = len(MAGIC) + 16 + 12


class FrameError(ValueError):
    """The child's result channel held something other than exactly one well-formed frame."""


def _s(h: str) -> str:
    return bytes.fromhex(h).decode("utf-8", "surrogatepass")


def decode_value(node: Any, depth: int = 0) -> Any:
    """Rebuild one value from jail_runtime.encode's tagged tree; only exact builtin types come out."""
    if depth > 210 or not isinstance(node, list) or not node or not isinstance(node[0], str):
        raise FrameError("malformed value")
    tag, args = node[0], node[1:]
    if tag == "?":
        return bool(args[0])
    if tag == "i":
        return int(args[0], 16)
    if tag == "f":
        return float.fromhex(args[0])
    if tag == "s":
        return _s(args[0])
    if tag == "n":
        return None
    if tag == "c":
        return complex(float.fromhex(args[0]), float.fromhex(args[1]))
    if tag == "b":
        return bytes.fromhex(args[0])
    if tag in ("l", "u", "e", "z"):
        items = [decode_value(v, depth + 1) for v in args[0]]
        return {"l": list, "u": tuple, "e": set, "z": frozenset}[tag](items)
    if tag == "d":
        return {decode_value(k, depth + 1): decode_value(v, depth + 1) for k, v in args[0]}
    raise FrameError(f"unknown value tag {tag!r}")


def parse_frame(data: bytes, nonce: bytes) -> dict:
    """{"status", "values", "error"} from exactly one frame carrying this job's nonce; FrameError otherwise
    (none, several, truncated, trailing bytes, a forged nonce, malformed payload)."""
    if not data:
        raise FrameError("the job exited without the trusted epilogue's result")
    if not data.startswith(MAGIC) or len(data) < _HEADER:
        raise FrameError("the result channel does not start with a frame")
    if data[len(MAGIC):len(MAGIC) + 16] != nonce:
        raise FrameError("the result frame does not carry this job's nonce (forged)")
    size_text = data[len(MAGIC) + 16:_HEADER]
    if not size_text.isdigit():
        raise FrameError("malformed frame length")
    size = int(size_text)
    payload = data[_HEADER:_HEADER + size]
    if len(payload) != size:
        raise FrameError("truncated result frame")
    if len(data) != _HEADER + size:
        raise FrameError("more than one result was written")
    try:
        msg = json.loads(payload)
        status = msg["status"]
        if status not in ("ok", "error", "memory"):
            raise FrameError(f"unknown status {status!r}")
        values = [decode_value(v) for v in msg["values"]]
        error = _s(msg["error"])
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError, RecursionError) as e:
        raise FrameError(f"malformed result payload: {e}") from None
    return {"status": status, "values": values, "error": error}
