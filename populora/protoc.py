"""`python -m populora.protoc`: compile the gRPC contracts in proto/ into the message modules of populora.pb.

Run once at install (`make install`, the Dockerfile) and after editing a .proto; nothing generates code at import.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parents[1] / "proto"
OUT_DIR = Path(__file__).resolve().parent / "pb"
CONTRACTS = ("common", "inference", "trainer", "league", "sandbox", "evolver")


def stale() -> list[str]:
    """The contracts whose generated module is missing or older than its .proto."""
    out = []
    for name in CONTRACTS:
        src, gen = PROTO_DIR / f"{name}.proto", OUT_DIR / f"{name}_pb2.py"
        if not gen.exists() or (src.exists() and src.stat().st_mtime > gen.stat().st_mtime):
            out.append(name)
    return out


def generate() -> None:
    """Message modules (and type stubs) for every contract; imports rewritten to be package-relative. Services
    and clients are built from the descriptors at run time (populora.rpc), so no gRPC stub code is generated."""
    if not PROTO_DIR.is_dir():
        raise RuntimeError(f"gRPC contracts not found at {PROTO_DIR}; reinstall from a full clone")
    from grpc_tools import protoc

    include = Path(protoc.__file__).parent / "_proto"  # google/protobuf/descriptor.proto
    files = [str(PROTO_DIR / f"{n}.proto") for n in CONTRACTS]
    for old in OUT_DIR.glob("*_pb2*.py*"):
        old.unlink()
    args = ["protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={OUT_DIR}", f"--pyi_out={OUT_DIR}", *files]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed on proto/*.proto; see the messages above")
    for path in OUT_DIR.glob("*_pb2.py*"):
        text = path.read_text()
        fixed = re.sub(r"^import (\w+_pb2) as", r"from . import \1 as", text, flags=re.M)
        if fixed != text:
            path.write_text(fixed)


if __name__ == "__main__":
    generate()
    print(f"gRPC messages generated into {OUT_DIR}")
    sys.exit(0)
