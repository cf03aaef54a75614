"""Who is calling, and may they: the gRPC servers' one check of a call's credential against the scope table
(populora.scopes), before the service sees the call.

The caller's identity is the one its client certificate names (mutual TLS); without one, the identity whose scoped
token the call presents as `authorization: Bearer <token>`. A server keeps no identity's token, only its verifier
(`services.tokens`, `services.tokens_path`: populora.tokens), and checks a presented token against every verifier in
constant time. The deployment-wide token (`services.token` on a server) stands for every identity at once: it is for
a development setup on one machine, and a server that holds one says so in its log. A call without a credential it
needs ends UNAUTHENTICATED; an identity calling outside its scope ends PERMISSION_DENIED, naming what that identity may
call on this service and nothing else; either way the service never sees it. Reads need no credential only on a
plaintext server with no scoped tokens; the health service is always open.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
import yaml
from google.protobuf.descriptor import ServiceDescriptor

from populora import tokens
from populora.config.base import ConfigError
from populora.contracts import CONTRACTS, is_read_only
from populora.scopes import IDENTITIES, allowed, kind, verifier_index
from populora.tls import peer_identity

log = logging.getLogger(__name__)
EVERY = "*"  # the identity of the deployment-wide token: every method of every service


def token_matches(given: str, token: str) -> bool:
    """Constant-time comparison of a presented bearer token; never true while no token is configured."""
    return bool(token) and hmac.compare_digest(given.encode(), token.encode())


def bearer(header: str) -> str:
    """The token of an `authorization: Bearer <token>` value ("" when the scheme is not Bearer)."""
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class WatchedFile:
    """A small file read again whenever it changes (modification time, size, inode), parsed by `parse`. The first
    read must succeed (an error naming the file); a later content that cannot be read or parsed keeps the last good
    value, with a warning, so a half-written file never locks every caller out."""

    def __init__(self, path: str | Path, parse: Callable[[str], Any], what: str):
        self.path, self.parse, self.what = Path(path), parse, what
        self._lock = threading.Lock()
        self._stamp = self._stat()
        try:
            self.value = parse(self.path.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"{what}: cannot use {self.path}: {e}") from None

    def _stat(self) -> tuple | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def get(self) -> Any:
        stamp = self._stat()
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    self._stamp = stamp
                    try:
                        self.value = self.parse(self.path.read_text())
                        log.info("%s: read %s again", self.what, self.path)
                    except (OSError, ValueError) as e:
                        log.warning("%s: %s cannot be used (%s); keeping what it held before", self.what, self.path, e)
        return self.value


def one_token(text: str) -> str:
    token = text.strip()
    if not token or any(c.isspace() for c in token):
        raise ValueError("the file must hold one token")
    return token


def token_mapping(text: str) -> dict:
    try:
        tokens = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ValueError(f"not YAML: {' '.join(str(e).split())}") from None
    if not isinstance(tokens, dict):
        raise ValueError("the file must hold a mapping identity -> the verifier of its token")
    verifier_index(tokens)
    return tokens


def scope_on(identity: str, service: str) -> str:
    """`Service.Method, ...` of what `identity` may call on `service` (over gRPC and REST), "nothing" when none: the
    one scope a refusal names (never another service's methods, never another identity's)."""
    from populora.scopes import rest_scope_on

    methods = [f"{CONTRACTS[service].name}.{m.name}" for m in CONTRACTS[service].methods
               if allowed(identity, service, m.name)]
    methods += [f"{CONTRACTS[service].name}.{op} (REST)" for op in rest_scope_on(identity, service)]
    return ", ".join(methods) or "nothing"


class Access:
    """The credentials a server accepts: the deployment-wide token (development on one machine), the verifiers of the
    scoped tokens, and (with TLS) the identity of each client certificate. Files (`token_file`, `tokens_file`) are
    read again when they change."""

    def __init__(self, token: str = "", tokens: dict | None = None, tls: bool = False, token_file: str = "",
                 tokens_file: str = ""):
        self.tls, self._token = tls, token
        self._static = dict(tokens or {})
        self._index = verifier_index(self._static)
        self._token_file = WatchedFile(token_file, one_token, "services.token_path") if token_file else None
        self._tokens_file = WatchedFile(tokens_file, token_mapping, "services.tokens_path") if tokens_file else None
        self._merged: tuple[Any, list] = (None, self._index)
        # a plaintext server without scoped tokens (development on one machine): reads are open
        self.open_reads = not tls and not self._index and self._tokens_file is None

    @classmethod
    def from_config(cls, services, tls: bool, server: str = "") -> Access:
        """From a ServicesConfig (token, tokens, token_path, tokens_path); `server` names the server that takes
        them, which warns when it holds the deployment-wide token."""
        access = cls(services.token, services.tokens, tls, services.token_path, services.tokens_path)
        if server and access.token:
            log.warning("%s: services.token is set: this server takes that one token for every identity and every "
                        "method. It is for a development setup on one machine; a deployment gives each server the "
                        "verifiers of the identities' own tokens (services.tokens_path, `populora token`) and each "
                        "client its own token or certificate", server)
        return access

    @property
    def token(self) -> str:
        return self._token_file.get() if self._token_file else self._token

    @property
    def scoped(self) -> list[tuple[tuple[bytes, bytes], str]]:
        """[(verifier, identity)], the tokens file's (as last read) over the configuration's."""
        if self._tokens_file is None:
            return self._index
        loaded = self._tokens_file.get()
        seen, index = self._merged
        if loaded is not seen:
            index = verifier_index({**self._static, **loaded})
            self._merged = (loaded, index)
        return index

    def _token_identity(self, given: str) -> str:
        if token_matches(given, self.token):
            return EVERY
        found = ""
        for parsed, identity in self.scoped:  # every one computed and compared: the time does not say which matched
            if tokens.matches(given, parsed):
                found = identity
        return found

    def takes_credentials(self) -> bool:
        """Whether any credential could pass here: a certificate (TLS), the deployment-wide token or a verifier."""
        return self.tls or bool(self.token) or bool(self.scoped)

    def identity(self, authorization: str, certificate_identity: str, read_only: bool) -> str:
        """The identity of a call (EVERY for the deployment-wide token, "" for an open read); Refused
        (UNAUTHENTICATED) when it has no credential this server takes."""
        if certificate_identity:
            if certificate_identity not in IDENTITIES:
                raise Refused(grpc.StatusCode.UNAUTHENTICATED,
                              f"the client certificate names {certificate_identity!r}, no identity of this "
                              f"deployment ({', '.join(IDENTITIES)})")
            return certificate_identity
        given = bearer(authorization)
        found = self._token_identity(given) if given else ""
        if found:
            return found
        if read_only and self.open_reads:
            return ""
        if not self.takes_credentials():
            why = ("this server has no credential configured (no TLS, no verifier of a scoped token, no token), so it "
                   "refuses this call: give it services.tokens_path (`populora token`) or turn on services.tls")
        elif given:
            why = "the token of 'authorization: Bearer <token>' is not one this server takes (wrong, old or unknown)"
        else:
            why = ("this call needs the caller's credential: its client certificate (services.tls) or "
                   "'authorization: Bearer <token>' with its own token (`populora token`)")
        raise Refused(grpc.StatusCode.UNAUTHENTICATED, why)

    def check(self, service: str, method: str, authorization: str, certificate_identity: str) -> str:
        """The identity of a call that may go ahead; Refused otherwise."""
        identity = self.identity(authorization, certificate_identity, kind(service, method) == "read")
        if identity in (EVERY, "") or allowed(identity, service, method):
            return identity
        raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                      f"{identity} may not call {CONTRACTS[service].name}.{method} (a {kind(service, method)}); "
                      f"on {service} it may call: {scope_on(identity, service)}")


class AccessInterceptor(grpc.ServerInterceptor):
    """Checks every call of the served contracts (not the health service) with `Access` before the service sees it."""

    def __init__(self, access: Access, contracts: Iterable[ServiceDescriptor]):
        self.access = access
        names = {c.full_name: n for n, c in CONTRACTS.items()}
        self.methods = {f"/{c.full_name}/{m.name}": (names[c.full_name], m.name, is_read_only(m))
                        for c in contracts for m in c.methods}

    def intercept_service(self, continuation, details):
        entry = self.methods.get(details.method)
        handler = continuation(details)
        if entry is None or handler is None:
            return handler
        service, method, _ = entry
        authorization = dict(details.invocation_metadata or ()).get("authorization", "")

        def check(context: grpc.ServicerContext) -> None:
            try:
                self.access.check(service, method, authorization, peer_identity(context))
            except Refused as e:
                context.abort(e.code, e.message)

        if handler.unary_stream is not None:
            inner_stream = handler.unary_stream

            def stream(request, context):
                check(context)
                yield from inner_stream(request, context)

            return grpc.unary_stream_rpc_method_handler(stream, handler.request_deserializer,
                                                        handler.response_serializer)
        inner = handler.unary_unary

        def unary(request, context):
            check(context)
            return inner(request, context)

        return grpc.unary_unary_rpc_method_handler(unary, handler.request_deserializer, handler.response_serializer)
