"""Mutual TLS for the gRPC connections (`services.tls`): the files of this process's identity, a server's credentials
(it requires a client certificate signed by the CA, and reads its files again when they change), a client's (it
checks the server's name), the identity a server reads off its peer's certificate, and the refusal of a plaintext
server on an address other machines reach.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

from populora.config.base import ConfigError
from populora.scopes import IDENTITIES

log = logging.getLogger(__name__)


class TlsError(ConfigError):
    """A TLS setting that cannot work: a file that is not there, an identity that does not exist, a plaintext
    server on a non-loopback address."""


@dataclass(frozen=True)
class TlsFiles:
    """The CA bundle, certificate and key of one identity."""

    identity: str
    ca: Path
    cert: Path
    key: Path

    def _how(self) -> str:
        folder = self.cert.parent
        return (f"make them with `populora certs --dir {folder} --name {self.identity}` (a development CA), or "
                "point services.tls.ca / cert / key at your own")

    def read(self) -> tuple[bytes, bytes, bytes]:
        """(CA bundle, certificate, key) as PEM; TlsError naming the file that is missing or not PEM."""
        out = []
        for what, path in (("the CA certificate (services.tls.ca)", self.ca),
                           (f"{self.identity}'s certificate (services.tls.cert)", self.cert),
                           (f"{self.identity}'s key (services.tls.key)", self.key)):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                raise TlsError(f"services.tls: {what} {path} does not exist; {self._how()}") from None
            except OSError as e:
                raise TlsError(f"services.tls: cannot read {what} {path}: {e}") from None
            if b"-----BEGIN " not in data:
                raise TlsError(f"services.tls: {what} {path} holds no PEM block; {self._how()}")
            out.append(data)
        return out[0], out[1], out[2]

    def pair_ok(self) -> bool:
        """Whether the files can be read and the certificate and key belong together (not so for a moment while
        one of them is replaced and the other not yet)."""
        try:
            _, cert, key = self.read()
        except TlsError:
            return False
        return _pair_matches(cert, key)

    def stamp(self) -> tuple:
        """What changes when any of the three files is replaced (modification time, size, inode)."""
        out = []
        for path in (self.ca, self.cert, self.key):
            try:
                st = path.stat()
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)


def tls_files(tls, identity: str | None = None) -> TlsFiles | None:
    """The files of `identity` from a TlsConfig, checked to exist; None when TLS is off. A server passes its
    service's name; a process that serves nothing passes None: services.tls.identity, else the coordinator."""
    if not tls.enabled:
        return None
    identity = identity or tls.identity or "coordinator"
    if identity not in IDENTITIES:
        raise TlsError(f"services.tls.identity {identity!r} is not an identity of the deployment; allowed: "
                       f"{list(IDENTITIES)}")
    if not tls.dir and not (tls.ca and tls.cert and tls.key):
        raise TlsError("services.tls.enabled needs services.tls.dir (where `populora certs --dir DIR` wrote) or all "
                       "of services.tls.ca, cert and key")
    folder = Path(tls.dir or ".")
    files = TlsFiles(identity, Path(tls.ca or folder / "ca.pem"), Path(tls.cert or folder / f"{identity}.pem"),
                     Path(tls.key or folder / f"{identity}-key.pem"))
    files.read()
    return files


def _pair_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError:
        return False
    return cert.public_key().public_numbers() == key.public_key().public_numbers()


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """A server's credentials: its certificate, and a client certificate required and checked against the CA
    bundle. The files are read again at the first handshake after any of them changed, so a renewed certificate
    or a new CA bundle takes effect without a restart; a certificate and key that do not belong together (one of
    them replaced, the other not yet) keep the previous pair until they do."""
    ca, cert, key = files.read()
    seen = {"stamp": files.stamp()}
    lock = threading.Lock()

    def fetch():
        stamp = files.stamp()
        if stamp == seen["stamp"]:
            return None
        with lock:
            try:
                ca, cert, key = files.read()
            except TlsError as e:
                log.warning("%s; keeping the certificates read before", e)
                return None
            if not _pair_matches(cert, key):
                log.warning("services.tls: %s and %s are not one pair (yet); keeping the certificates read before",
                            files.cert, files.key)
                return None
            seen["stamp"] = stamp
            log.info("services.tls: read %s, %s and %s again", files.ca, files.cert, files.key)
            return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    initial = grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)
    return grpc.dynamic_ssl_server_credentials(initial, fetch, require_client_authentication=True)


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """A client's credentials: its own certificate, and the server's checked against the CA bundle."""
    ca, cert, key = files.read()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


PEER_IDENTITY = "populora.peer_identity"  # an HTTPS request's scope key: the identity its client certificate names


def _certificate_identity(peercert: dict | None) -> str:
    """The common name of a verified peer certificate as `ssl.SSLSocket.getpeercert()` gives it ("" for none)."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return ""


def _peer_protocol():
    """uvicorn's HTTP protocol, with each connection's client certificate (checked against the CA by the TLS
    handshake) named in the scope of every request it carries (PEER_IDENTITY), as gRPC reads it off its peer."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class PeerIdentityProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            identity = _certificate_identity(transport.get_extra_info("peercert"))
            inner = self.app

            async def app(scope, receive, send):
                scope[PEER_IDENTITY] = identity
                await inner(scope, receive, send)

            self.app = app

    return PeerIdentityProtocol


def uvicorn_ssl(files: TlsFiles) -> dict:
    """uvicorn.Config's arguments for HTTPS with this identity's certificate: a client certificate is checked
    against the CA when one is presented, and not required (a browser, an operator's curl with a bearer token); one
    that is presented names the caller of every request of its connection (PEER_IDENTITY, read by populora.http's
    Guard). Read when the server starts."""
    import ssl

    files.read()
    return {"ssl_certfile": str(files.cert), "ssl_keyfile": str(files.key), "ssl_ca_certs": str(files.ca),
            "ssl_cert_reqs": ssl.CERT_OPTIONAL, "http": _peer_protocol()}


def peer_identity(context: grpc.ServicerContext) -> str:
    """The identity on the client's certificate (its common name; "" on a connection without TLS)."""
    auth = context.auth_context() or {}
    names = auth.get("x509_common_name") or []
    return names[0].decode() if names else ""


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(name: str, host: str, files: TlsFiles | None, insecure: bool, what: str = "gRPC") -> None:
    """A server without TLS on an address other machines reach starts only when told `insecure` (said in the log);
    TlsError otherwise."""
    if files is not None or is_loopback(host):
        return
    if not insecure:
        raise TlsError(f"{name}: refusing to serve plaintext {what} on {host}, an address other machines reach: turn "
                       "on services.tls (`populora certs` makes a development CA and certificates), bind loopback, "
                       "or pass --insecure (services.tls.insecure) to serve without TLS anyway")
    log.warning("%s: serving plaintext %s on %s (--insecure): anyone on the network path reads and can replay "
                "its credentials", name, what, host)
