"""`populora certs`: a development certificate authority and one certificate and key per identity of a deployment
(populora.scopes.IDENTITIES), for mutual TLS between the services (`services.tls`).

Each certificate names its identity as its common name and as a DNS subject alternative name (the name a client
checks a server against, and a server reads a client's identity from), with any extra host names or addresses given,
and may serve and be a client. Keys are ECDSA P-256, written readable by their owner only. The files in the directory:
`ca.pem` and `ca-key.pem`, and `NAME.pem` and `NAME-key.pem` per identity. An existing CA in the directory is kept
(reissuing certificates under it is how they are renewed), unless a new one is asked for. The data stores of a
deployment (DATA_STORES: Postgres and Redis, by their service names) get a server certificate the same way; they are
no identity, so a gRPC server refuses a call that presents one.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from populora.scopes import IDENTITIES

CA_NAME = "populora development CA"
# The servers of a deployment that are no identity of it: their certificates name their host (compose service name)
DATA_STORES = ("postgres", "redis")
NAMES = (*IDENTITIES, *DATA_STORES)


def ca_file(directory: str | Path) -> Path:
    return Path(directory) / "ca.pem"


def cert_file(directory: str | Path, name: str) -> Path:
    return Path(directory) / f"{name}.pem"


def key_file(directory: str | Path, name: str) -> Path:
    return Path(directory) / f"{name}-key.pem"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _builder(subject: str, issuer: x509.Name | None, public_key, days: float, not_before: dt.datetime | None
             ) -> x509.CertificateBuilder:
    start = not_before or _now() - dt.timedelta(minutes=5)  # a little slack for clocks that differ
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    return (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(start)
            .not_valid_after(start + dt.timedelta(days=days)))


def make_ca(days: float = 3650, name: str = CA_NAME) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA that may sign certificates (and no further CAs)."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(name, None, key.public_key(), days, None)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _san(name: str, hosts: Iterable[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = [x509.DNSName(name)]
    for host in hosts:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(entries)


def issue(ca_key, ca_cert: x509.Certificate, name: str, days: float = 365, hosts: Sequence[str] = (),
          not_before: dt.datetime | None = None) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A certificate for identity `name` signed by the CA: `name` as common name and DNS name, `hosts` as further
    names (DNS names or IP addresses), valid for `days` from `not_before` (now), for servers and clients."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(name, ca_cert.subject, key.public_key(), days, not_before)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_san(name, hosts), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write_private(path: Path, data: bytes) -> None:
    """Write a key readable by its owner only, replacing any file there at once (a reader never sees half of it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_public(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def load_ca(directory: str | Path):
    """The CA's key and certificate in `directory` (FileNotFoundError when either is not there)."""
    key = serialization.load_pem_private_key(key_file(directory, "ca").read_bytes(), password=None)
    cert = x509.load_pem_x509_certificate(ca_file(directory).read_bytes())
    return key, cert


def write_certs(directory: str | Path, names: Sequence[str] = NAMES, days: float = 365, ca_days: float = 3650,
                hosts: Sequence[str] = (), new_ca: bool = False) -> list[Path]:
    """Write (or reuse) the CA in `directory` and a certificate and key for each of `names`; returns the files
    written. A key's file is written before its certificate, so a reader of a new certificate finds its key."""
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise ValueError(f"unknown identities {unknown}; the identities of a deployment are {list(IDENTITIES)}, its "
                         f"data stores {list(DATA_STORES)}")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if new_ca or not (ca_file(root).exists() and key_file(root, "ca").exists()):
        ca_key, ca_cert = make_ca(ca_days)
        write_private(key_file(root, "ca"), key_pem(ca_key))
        write_public(ca_file(root), cert_pem(ca_cert))
        written += [key_file(root, "ca"), ca_file(root)]
    else:
        ca_key, ca_cert = load_ca(root)
    for name in names:
        key, cert = issue(ca_key, ca_cert, name, days, hosts)
        write_private(key_file(root, name), key_pem(key))
        write_public(cert_file(root, name), cert_pem(cert))
        written += [key_file(root, name), cert_file(root, name)]
    return written


def add_parser(sub) -> None:
    """The `populora certs` subcommand."""
    c = sub.add_parser("certs", help="write a development CA and a certificate and key per service and data store "
                                     "(mutual TLS)")
    c.add_argument("--dir", default="certs", help="where to write them (default: certs); services.tls.dir")
    c.add_argument("--days", type=float, default=365, help="validity of each certificate in days (default 365)")
    c.add_argument("--ca-days", type=float, default=3650, help="validity of a new CA in days (default 3650)")
    c.add_argument("--name", dest="names", action="append", default=[], choices=NAMES, metavar="NAME",
                   help=f"issue only this identity's (or data store's) certificate; repeatable (default: all of "
                        f"{', '.join(NAMES)})")
    c.add_argument("--host", dest="hosts", action="append", default=[], metavar="HOST",
                   help="a further DNS name or IP address in every certificate issued; repeatable")
    c.add_argument("--new-ca", action="store_true", help="make a new CA even when the directory holds one")
    c.set_defaults(func=main)


def main(args) -> int:
    names = args.names or list(NAMES)
    if args.days <= 0 or args.ca_days <= 0:
        raise SystemExit("error: --days and --ca-days must be positive")
    written = write_certs(args.dir, names, args.days, args.ca_days, args.hosts, args.new_ca)
    for path in written:
        print(path)
    print(f"CA: {ca_file(args.dir)}; set services.tls.enabled=true and services.tls.dir={args.dir} "
          "(each process presents the certificate of its own identity)")
    return 0
