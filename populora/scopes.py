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


def kind(service: str, method: str) -> str:
    """READ for a method its contract marks read-only, else WRITE."""
    return READ if is_read_only(CONTRACTS[service].methods_by_name[method]) else WRITE


def allowed(identity: str, service: str, method: str) -> bool:
    """Whether `identity` may call `service`.`method`."""
    return method in SCOPES.get(identity, {}).get(service, ())


def scope_of(identity: str) -> list[str]:
    """`Service.Method` of every method `identity` may call, in the contracts' order."""
    return [f"{CONTRACTS[s].name}.{m.name}" for s in SERVICE_NAMES for m in CONTRACTS[s].methods
            if allowed(identity, s, m.name)]


def token_index(tokens: dict[str, str | list[str]]) -> dict[str, str]:
    """Scoped tokens (identity -> its token, or its tokens while one is being replaced by another) as token ->
    identity; ValueError for an identity that does not exist, or one token given to two identities (a call
    presenting it could not say which it is)."""
    unknown = sorted(set(tokens) - set(IDENTITIES))
    if unknown:
        raise ValueError(f"services.tokens: unknown identities {unknown}; allowed: {list(IDENTITIES)}")
    out: dict[str, str] = {}
    for identity, given in tokens.items():
        for token in ([given] if isinstance(given, str) else given):
            if not isinstance(token, str):
                raise ValueError(f"services.tokens: {identity}'s token is not text")
            if token and out.setdefault(token, identity) != identity:
                raise ValueError("services.tokens: two identities hold the same token; give each its own")
    return out


def check_tokens(tokens: dict[str, str | list[str]]) -> None:
    """token_index's checks alone."""
    token_index(tokens)


def table_markdown() -> str:
    """The scope table as docs/operations.md shows it: one row per method, one column per identity that may call
    something, `R`/`W` where that identity may call it (a read or a write), `-` where it may not."""
    callers = [i for i in IDENTITIES if any(SCOPES.get(i, {}).values())]
    head = ["service", "method", "kind", *callers]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for service in SERVICE_NAMES:
        for m in CONTRACTS[service].methods:
            k = kind(service, m.name)
            cells = [("R" if k == READ else "W") if allowed(i, service, m.name) else "-" for i in callers]
            rows.append(f"| {service} | {m.name} | {k} | " + " | ".join(cells) + " |")
    nothing = [i for i in IDENTITIES if i not in callers]
    return "\n".join(rows) + f"\n\nMay call no gRPC method of any service: {', '.join(nothing)}.\n"


if __name__ == "__main__":  # the table for docs/operations.md
    print(table_markdown(), end="")
