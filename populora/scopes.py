"""Who may call what: the identities of a deployment (each with its own certificate or token) and, per identity, the
methods of each service it may call.

An identity is a service's name (it serves its contract and may call others) or the name of a client that serves no
contract: the coordinator (`populora train`, its phase workers, `populora eval`), the dashboard's readers and an
external verifier. `populora certs` issues one certificate per identity. The table is what the code calls over gRPC
(tests/security/test_scopes.py holds it to the call sites) and the servers enforce it (populora.access); whether a
method writes comes from its contract (`read_only`). docs/operations.md shows it, generated from here.
"""

from __future__ import annotations

from populora.contracts import CONTRACTS, SERVICE_NAMES, is_read_only

# The clients that serve no gRPC contract of their own.
CLIENTS = ("coordinator", "dashboard", "verifier")
IDENTITIES: tuple[str, ...] = (*SERVICE_NAMES, *CLIENTS)

# identity -> service -> the methods of its contract this identity may call. An identity or service not named may
# call nothing there. The services call one another nothing: the coordinator drives every phase.
SCOPES: dict[str, dict[str, tuple[str, ...]]] = {
    "coordinator": {  # the step's phases (coordinator/phases), the warm start, accounting, run progress, evaluation
        # (Score: an experiment's likelihood of reference answers, populora.evals.likelihood)
        "inference": ("Generate", "Score", "LoadAdapter", "UnloadAdapter", "ListAdapters"),
        "trainer": ("InitAdapter", "AdoptAdapter", "UpdateBatch", "DropAdapter", "WarmStart"),
        "league": ("CreateRun", "RegisterAdapters", "Matchmake", "ReportMatches", "SelectForReplacement",
                   "RecordChild", "GetRatings", "RecordCompute", "RecordEvals", "RecordStepSummary", "RecordRun",
                   "RecordPhases", "RecordStepProblems"),
        "sandbox": ("Execute", "ValidateProposals", "CheckAnswers"),
        "evolver": ("Breed", "ListOperators"),
    },
    "dashboard": {  # a reader of the league: every read, no write
        "league": ("GetRatings", "GetLineage", "GetCompute", "GetEvals"),
    },
}
READ, WRITE = "read", "write"

# The REST operations that run no gRPC method (service -> operation -> READ or WRITE): `Read` is every REST read of a
# service's data and its /metrics (the league's leaderboard, lineage, match log, the dashboard's views, ...); the
# verifier registry's three are the sandbox's. A REST write that runs a gRPC method (the league's POST /v1/runs runs
# CreateRun, ...) is held to SCOPES as that method.
REST_OPERATIONS: dict[str, dict[str, str]] = {
    **{service: {"Read": READ} for service in SERVICE_NAMES},
    "sandbox": {"Read": READ, "RegisterVerifier": WRITE, "ListVerifiers": READ, "DeleteVerifier": WRITE},
}
# identity -> service -> the REST operations of REST_OPERATIONS it may call. The dashboard reads every service's
# data and metrics (a Prometheus presents its certificate or token); the coordinator, the operator's identity, reads
# the league and keeps the verifier registry.
REST_SCOPES: dict[str, dict[str, tuple[str, ...]]] = {
    "coordinator": {"league": ("Read",), "sandbox": ("RegisterVerifier", "ListVerifiers", "DeleteVerifier")},
    "dashboard": {service: ("Read",) for service in SERVICE_NAMES},
}


def kind(service: str, method: str) -> str:
    """READ for a method its contract marks read-only, else WRITE."""
    return READ if is_read_only(CONTRACTS[service].methods_by_name[method]) else WRITE


def allowed(identity: str, service: str, method: str) -> bool:
    """Whether `identity` may call `service`.`method`."""
    return method in SCOPES.get(identity, {}).get(service, ())


def rest_kind(service: str, operation: str) -> str:
    """READ or WRITE of a REST operation: a gRPC method's kind, or REST_OPERATIONS'."""
    if operation in REST_OPERATIONS.get(service, {}):
        return REST_OPERATIONS[service][operation]
    return kind(service, operation)


def rest_allowed(identity: str, service: str, operation: str) -> bool:
    """Whether `identity` may call a REST operation of `service`: a gRPC method it runs (SCOPES), or one of
    REST_OPERATIONS (REST_SCOPES)."""
    if operation in REST_OPERATIONS.get(service, {}):
        return operation in REST_SCOPES.get(identity, {}).get(service, ())
    return allowed(identity, service, operation)


def rest_scope_on(identity: str, service: str) -> list[str]:
    """The REST operations of REST_OPERATIONS `identity` may call on `service`."""
    return [op for op in REST_OPERATIONS.get(service, {}) if op in REST_SCOPES.get(identity, {}).get(service, ())]


def scope_of(identity: str) -> list[str]:
    """`Service.Method` of every method `identity` may call, in the contracts' order."""
    return [f"{CONTRACTS[s].name}.{m.name}" for s in SERVICE_NAMES for m in CONTRACTS[s].methods
            if allowed(identity, s, m.name)]


def verifier_index(tokens: dict[str, str | list[str]]) -> list[tuple[tuple[bytes, bytes], str]]:
    """Scoped tokens as a server keeps them (identity -> the verifier of its token, or its verifiers while one token
    replaces another: populora.tokens) as [(parsed verifier, identity)]; ValueError for an identity that does not
    exist, or an entry that is not a verifier (a token in clear among them: servers keep verifiers only)."""
    from populora.tokens import TokenError, parse

    unknown = sorted(set(tokens) - set(IDENTITIES))
    if unknown:
        raise ValueError(f"services.tokens: unknown identities {unknown}; allowed: {list(IDENTITIES)}")
    out: list[tuple[tuple[bytes, bytes], str]] = []
    seen: dict[str, str] = {}
    for identity, given in tokens.items():
        for entry in ([given] if isinstance(given, str) else given):
            if not isinstance(entry, str):
                raise ValueError(f"services.tokens: {identity}'s entry is not text")
            try:
                out.append((parse(entry), identity))
            except TokenError as e:
                raise ValueError(f"services.tokens: {identity}'s entry is {e}") from None
            if seen.setdefault(entry, identity) != identity:
                raise ValueError("services.tokens: two identities hold the same verifier; give each its own token")
    return out


def check_tokens(tokens: dict[str, str | list[str]]) -> None:
    """verifier_index's checks alone."""
    verifier_index(tokens)


def table_markdown() -> str:
    """The scope table as docs/operations.md shows it: one row per method (then the service's REST operations), one
    column per identity that may call something, `R`/`W` where that identity may call it (a read or a write), `-`
    where it may not."""
    callers = [i for i in IDENTITIES if any(SCOPES.get(i, {}).values()) or any(REST_SCOPES.get(i, {}).values())]
    head = ["service", "method", "kind", *callers]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for service in SERVICE_NAMES:
        for m in CONTRACTS[service].methods:
            k = kind(service, m.name)
            cells = [("R" if k == READ else "W") if allowed(i, service, m.name) else "-" for i in callers]
            rows.append(f"| {service} | {m.name} | {k} | " + " | ".join(cells) + " |")
        for op, k in REST_OPERATIONS.get(service, {}).items():
            cells = [("R" if k == READ else "W") if rest_allowed(i, service, op) else "-" for i in callers]
            rows.append(f"| {service} | {op} (REST) | {k} | " + " | ".join(cells) + " |")
    nothing = [i for i in IDENTITIES if i not in callers]
    return "\n".join(rows) + f"\n\nMay call nothing on any service: {', '.join(nothing)}.\n"


if __name__ == "__main__":  # the table for docs/operations.md
    print(table_markdown(), end="")
