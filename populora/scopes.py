"""Who may call what: the identities of a deployment (each with its own certificate or token) and, per identity, the
methods of each service it may call.

An identity is a service's name (it serves its contract and may call others) or the name of a client that serves no
contract: the coordinator (`populora train`, its phase workers, `populora eval`), the dashboard's readers and an
external verifier. `populora certs` issues one certificate per identity.
"""

from __future__ import annotations

from populora.contracts import SERVICE_NAMES

# The clients that serve no gRPC contract of their own.
CLIENTS = ("coordinator", "dashboard", "verifier")
IDENTITIES: tuple[str, ...] = (*SERVICE_NAMES, *CLIENTS)
