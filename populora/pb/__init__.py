"""The message modules of the gRPC contracts in proto/, generated at install by `python -m populora.protoc`."""

from __future__ import annotations

import importlib

from populora.protoc import CONTRACTS, stale

_missing = stale()
if _missing:
    raise ImportError(f"the generated gRPC messages for {', '.join(_missing)} are missing or older than proto/; "
                      "run `make proto` (or `python -m populora.protoc`)")

common_pb2 = importlib.import_module(".common_pb2", __name__)
inference_pb2 = importlib.import_module(".inference_pb2", __name__)
trainer_pb2 = importlib.import_module(".trainer_pb2", __name__)
league_pb2 = importlib.import_module(".league_pb2", __name__)
sandbox_pb2 = importlib.import_module(".sandbox_pb2", __name__)
evolver_pb2 = importlib.import_module(".evolver_pb2", __name__)

__all__ = [f"{name}_pb2" for name in CONTRACTS]
