"""The one list of services and their gRPC contracts (proto/<name>.proto), and which of their methods only read."""

from __future__ import annotations

from google.protobuf.descriptor import ServiceDescriptor

from populora.pb import common_pb2, evolver_pb2, inference_pb2, league_pb2, sandbox_pb2, trainer_pb2

# config name -> its gRPC contract
CONTRACTS: dict[str, ServiceDescriptor] = {
    "inference": inference_pb2.DESCRIPTOR.services_by_name["Inference"],
    "trainer": trainer_pb2.DESCRIPTOR.services_by_name["Trainer"],
    "league": league_pb2.DESCRIPTOR.services_by_name["League"],
    "sandbox": sandbox_pb2.DESCRIPTOR.services_by_name["Sandbox"],
    "evolver": evolver_pb2.DESCRIPTOR.services_by_name["Evolver"],
}
SERVICE_NAMES = tuple(CONTRACTS)


def is_read_only(method) -> bool:
    """Whether a contract method is marked `option (populora.v1.read_only) = true` (proto/common.proto)."""
    return bool(method.GetOptions().Extensions[common_pb2.read_only])
