"""Scoped tokens and their verifiers: what a client presents, and what a server keeps in its place.

A token is a long random string one identity (populora.scopes.IDENTITIES) presents as `Authorization: Bearer <token>`
(gRPC metadata or an HTTP header). A server never holds it: its `services.tokens` / `services.tokens_path` map each
identity to the token's VERIFIER, `hmac-sha256:<salt>:<digest>`, the HMAC-SHA256 of the token keyed by a random salt
of its own (both hex). A presented token is checked by computing its HMAC under each verifier's salt again and
comparing the digests in constant time (hmac.compare_digest), so a server's files and memory give no identity's
token, and a verifier of one deployment says nothing about another's. The tokens `populora token` makes are 32
random bytes (256 bits): with nothing to guess from, a fast keyed hash is as strong as a slow one; a token of your
own shorter than MIN_TOKEN characters is refused. `populora token` (populora.tokenfiles) writes tokens and verifiers.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

SCHEME = "hmac-sha256"
MIN_TOKEN = 24
_VERIFIER = re.compile(rf"^{SCHEME}:([0-9a-f]{{32}}):([0-9a-f]{{64}})$")


class TokenError(ValueError):
    """A token or verifier that cannot be used; the message says why and what to do."""


def make_token() -> str:
    """A new token: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def check_token(token: str) -> str:
    """The token, when it can be one: printable, no whitespace, at least MIN_TOKEN characters."""
    if len(token) < MIN_TOKEN:
        raise TokenError(f"a token must be at least {MIN_TOKEN} characters (this one has {len(token)}): its verifier "
                         "could be searched for a short one; `populora token new` makes 43")
    if any(c.isspace() or not c.isprintable() for c in token):
        raise TokenError("a token is one word of printable characters (no whitespace)")
    return token


def _digest(salt: bytes, token: str) -> bytes:
    return hmac.new(salt, token.encode(), hashlib.sha256).digest()


def verifier(token: str, salt: bytes | None = None) -> str:
    """The verifier of `token`: `hmac-sha256:<salt>:<digest>`, under a new random salt unless one is given."""
    check_token(token)
    salt = secrets.token_bytes(16) if salt is None else salt
    if len(salt) != 16:
        raise TokenError("a verifier's salt is 16 bytes")
    return f"{SCHEME}:{salt.hex()}:{_digest(salt, token).hex()}"


def is_verifier(text: object) -> bool:
    return isinstance(text, str) and _VERIFIER.fullmatch(text) is not None


def parse(text: str) -> tuple[bytes, bytes]:
    """(salt, digest) of a verifier; TokenError for anything else, without repeating it (it may be a token)."""
    found = _VERIFIER.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise TokenError(f"not a token verifier ({SCHEME}:<32 hex salt>:<64 hex digest>); a server keeps verifiers, "
                         "never tokens: `populora token new NAME` (or `populora token hash` of a token of your own) "
                         "makes one")
    return bytes.fromhex(found.group(1)), bytes.fromhex(found.group(2))


def matches(token: str, parsed: tuple[bytes, bytes]) -> bool:
    """Whether `token` is the one a parsed verifier was made from (constant time in the digest)."""
    salt, digest = parsed
    return hmac.compare_digest(_digest(salt, token), digest)
