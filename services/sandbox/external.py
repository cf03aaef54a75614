"""Calls to external verifiers over HTTP: the JSON contract, timeout, retries and a circuit breaker per
verifier. A verifier that fails in any way gives `verifier_error` for its attempts (excluded from rewards),
never an exception to the caller.

Contract (also in the OpenAPI of the sandbox's REST app, as the callback of `POST /v1/verifiers`):
request `POST <url>` with `{"task_type": str, "attempts": [{"attempt_id": str, "task": Task, "response_text":
str}]}`; response 200 with `{"results": [{"attempt_id": str, "outcome": "correct"|"wrong"|"malformed",
"detail": str}]}` holding every attempt id it was sent and no other. Anything else is a failure.

With services.tls on, the sandbox reaches verifiers over HTTPS only, presenting its own certificate, and takes a
verdict only from a server whose certificate the deployment's CA signed for the identity `verifier` (and for the
URL's host): an external verifier's credential is that certificate, which opens no method of any service
(populora.scopes), and its verdicts count only as answers to the attempts the sandbox sent it. The files are read
again when they change.
"""

from __future__ import annotations

import ssl
import threading
import time
from dataclasses import dataclass, field

import httpx

from populora.tasks.verify import Attempt, Check
from populora.tls import TlsFiles

VERIFIER_IDENTITY = "verifier"

VERIFIER_OUTCOMES = ("correct", "wrong", "malformed")


@dataclass
class CircuitBreaker:
    """Closed -> open after `failures` consecutive failures; open refuses calls for `reset_s`, then lets one call
    through (half-open): success closes it, failure opens it again."""

    failures: int
    reset_s: float
    consecutive: int = 0
    opened_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def allow(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        with self._lock:
            if self.opened_at is None:
                return True
            if now - self.opened_at >= self.reset_s:
                self.opened_at = now  # half-open: this one call goes through, the others keep waiting
                return True
            return False

    def record(self, ok: bool, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            if ok:
                self.consecutive, self.opened_at = 0, None
            else:
                self.consecutive += 1
                if self.consecutive >= self.failures:
                    self.opened_at = now

    @property
    def state(self) -> str:
        return "closed" if self.opened_at is None else "open"


class VerifierCallError(RuntimeError):
    pass


class VerifierRefused(VerifierCallError):
    """A verifier the sandbox will not take a verdict from (not https, not the verifier identity): no retry."""


class ExternalVerifiers:
    """HTTP client of the registered verifiers, with one circuit breaker per verifier name."""

    def __init__(self, timeout_s: float = 10.0, retries: int = 2, breaker_failures: int = 5,
                 breaker_reset_s: float = 30.0, tls: TlsFiles | None = None):
        self.timeout_s, self.retries = timeout_s, retries
        self.breaker_failures, self.breaker_reset_s = breaker_failures, breaker_reset_s
        self._breakers: dict[str, CircuitBreaker] = {}
        self._lock = threading.Lock()
        self.tls, self._stamp = tls, tls.stamp() if tls else None
        self._http = self._client()

    def _client(self) -> httpx.Client:
        if self.tls is None:
            return httpx.Client(timeout=self.timeout_s)
        context = ssl.create_default_context(cafile=str(self.tls.ca))
        context.load_cert_chain(str(self.tls.cert), str(self.tls.key))
        return httpx.Client(timeout=self.timeout_s, verify=context)

    def _current(self) -> httpx.Client:
        """The client, made again with the files when any of them changed since (rotation without a stop)."""
        if self.tls is not None and self.tls.stamp() != self._stamp and self.tls.pair_ok():
            with self._lock:
                old, self._http, self._stamp = self._http, self._client(), self.tls.stamp()
            old.close()
        return self._http

    def breaker(self, name: str) -> CircuitBreaker:
        with self._lock:
            if name not in self._breakers:
                self._breakers[name] = CircuitBreaker(self.breaker_failures, self.breaker_reset_s)
            return self._breakers[name]

    def _post(self, url: str, body: dict) -> dict:
        if self.tls is not None and not url.lower().startswith("https://"):
            raise VerifierRefused(f"{url} is not https: with services.tls on, verifiers are reached over HTTPS "
                                    f"with a certificate for the identity {VERIFIER_IDENTITY!r}")
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                with self._current().stream("POST", url, json=body) as resp:
                    if self.tls is not None:
                        _check_peer(resp)  # before the body is read, while the connection is the response's
                    resp.read()
                if resp.status_code >= 500:
                    raise VerifierCallError(f"HTTP {resp.status_code}")
                if resp.status_code != 200:
                    # a 4xx will not get better by retrying
                    raise VerifierCallError(f"HTTP {resp.status_code}: {resp.text[:200]}")
                return resp.json()
            except (httpx.HTTPError, VerifierCallError, ValueError) as e:
                last = e
                if isinstance(e, VerifierRefused) or (isinstance(e, VerifierCallError) and str(e).startswith("HTTP 4")):
                    break
                if attempt < self.retries:
                    time.sleep(min(0.05 * 2 ** attempt, 1.0))
        raise VerifierCallError(f"{type(last).__name__}: {last}")

    @staticmethod
    def _parse(payload: dict, ids: list[str]) -> dict[str, tuple[str, str]]:
        results = payload.get("results") if isinstance(payload, dict) else None
        if not isinstance(results, list):
            raise VerifierCallError("the response has no 'results' list")
        out: dict[str, tuple[str, str]] = {}
        for r in results:
            if not isinstance(r, dict) or r.get("outcome") not in VERIFIER_OUTCOMES:
                raise VerifierCallError(f"bad result {str(r)[:200]}; outcome must be one of {VERIFIER_OUTCOMES}")
            out[str(r.get("attempt_id"))] = (r["outcome"], str(r.get("detail", ""))[:2000])
        missing = [i for i in ids if i not in out]
        if missing:
            raise VerifierCallError(f"the response lacks attempt(s) {missing[:5]}")
        foreign = sorted(set(out) - set(ids))
        if foreign:  # a verifier answers for the attempts it was sent, never for others
            raise VerifierCallError(f"the response names attempt(s) it was not sent {foreign[:5]}")
        return out

    def check(self, name: str, url: str, task_type: str, attempts: list[Attempt]) -> list[Check]:
        """One call for a batch of attempts of one task type; every failure becomes verifier_error."""
        breaker = self.breaker(name)
        if not breaker.allow():
            return [Check(a.attempt_id, "verifier_error", f"verifier {name!r}: circuit open", name)
                    for a in attempts]
        body = {"task_type": task_type, "attempts": [{"attempt_id": a.attempt_id, "task": a.task.to_dict(),
                                                      "response_text": a.response_text} for a in attempts]}
        try:
            got = self._parse(self._post(url, body), [a.attempt_id for a in attempts])
        except VerifierCallError as e:
            breaker.record(False)
            return [Check(a.attempt_id, "verifier_error", f"verifier {name!r}: {e}", name) for a in attempts]
        breaker.record(True)
        return [Check(a.attempt_id, got[a.attempt_id][0], got[a.attempt_id][1], name) for a in attempts]

    def close(self) -> None:
        self._http.close()


def _check_peer(resp: httpx.Response) -> None:
    """The server's certificate (already checked against the CA and the URL's host) names the verifier identity."""
    stream = resp.extensions.get("network_stream")
    peer = stream.get_extra_info("ssl_object").getpeercert() if stream is not None else None
    names = [value for rdn in (peer or {}).get("subject", ()) for key, value in rdn if key == "commonName"]
    if VERIFIER_IDENTITY not in names:
        raise VerifierRefused(f"the server's certificate is for {names or 'no identity'}, not the identity "
                                f"{VERIFIER_IDENTITY!r}")
