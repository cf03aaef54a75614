"""Generated gRPC stubs for the contracts in proto/, built on first import (grpcio-tools) when missing or stale."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parents[2] / "proto"
OUT_DIR = Path(__file__).resolve().parent
SERVICES = ("common", "inference", "trainer", "league", "sandbox", "evolver")


def _stale() -> bool:
    for name in SERVICES:
        src = PROTO_DIR / f"{name}.proto"
        out = OUT_DIR / f"{name}_pb2.py"
        if not out.exists() or (src.exists() and src.stat().st_mtime > out.stat().st_mtime):
            return True
    return False


def generate(force: bool = False) -> None:
    """Compile proto/*.proto into this package; imports are rewritten to be package-relative."""
    if not force and not _stale():
        return
    if not PROTO_DIR.is_dir():
        raise RuntimeError(f"gRPC contracts not found at {PROTO_DIR}; reinstall from a full clone")
    from grpc_tools import protoc

    files = [str(PROTO_DIR / f"{n}.proto") for n in SERVICES]
    args = ["protoc", f"-I{PROTO_DIR}", f"--python_out={OUT_DIR}", f"--grpc_python_out={OUT_DIR}",
            f"--pyi_out={OUT_DIR}", *files]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed on proto/*.proto; see the messages above")
    for path in OUT_DIR.glob("*_pb2*.py"):
        text = path.read_text()
        fixed = re.sub(r"^import (\w+_pb2) as", r"from . import \1 as", text, flags=re.M)
        if fixed != text:
            path.write_text(fixed)


generate()

common_pb2 = importlib.import_module(".common_pb2", __name__)
inference_pb2 = importlib.import_module(".inference_pb2", __name__)
inference_pb2_grpc = importlib.import_module(".inference_pb2_grpc", __name__)
trainer_pb2 = importlib.import_module(".trainer_pb2", __name__)
trainer_pb2_grpc = importlib.import_module(".trainer_pb2_grpc", __name__)
league_pb2 = importlib.import_module(".league_pb2", __name__)
league_pb2_grpc = importlib.import_module(".league_pb2_grpc", __name__)
sandbox_pb2 = importlib.import_module(".sandbox_pb2", __name__)
sandbox_pb2_grpc = importlib.import_module(".sandbox_pb2_grpc", __name__)
evolver_pb2 = importlib.import_module(".evolver_pb2", __name__)
evolver_pb2_grpc = importlib.import_module(".evolver_pb2_grpc", __name__)

__all__ = [n for n in dir(sys.modules[__name__]) if n.endswith(("_pb2", "_pb2_grpc"))]
