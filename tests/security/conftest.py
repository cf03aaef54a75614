"""Certificates for the TLS tests: one development CA with every identity, and a second CA whose certificates no
server of the first trusts."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from populora import certs
from populora.scopes import IDENTITIES
from populora.tls import TlsFiles


def files(folder: Path, name: str) -> TlsFiles:
    return TlsFiles(name, certs.ca_file(folder), certs.cert_file(folder, name), certs.key_file(folder, name))


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pki")
    certs.write_certs(folder, IDENTITIES, days=1, hosts=["127.0.0.1"])  # REST clients check the address
    return folder


@pytest.fixture(scope="session")
def other_pki(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("other-pki")
    certs.write_certs(folder, ["coordinator", "league"], days=1, hosts=["127.0.0.1"])
    return folder


@pytest.fixture(scope="session")
def expired(pki, tmp_path_factory) -> TlsFiles:
    """The coordinator's identity from the right CA, expired yesterday."""
    folder = tmp_path_factory.mktemp("expired")
    ca_key, ca_cert = certs.load_ca(pki)
    key, cert = certs.issue(ca_key, ca_cert, "coordinator", days=1,
                            not_before=dt.datetime.now(dt.UTC) - dt.timedelta(days=2))
    certs.write_private(folder / "coordinator-key.pem", certs.key_pem(key))
    certs.write_public(folder / "coordinator.pem", certs.cert_pem(cert))
    return TlsFiles("coordinator", certs.ca_file(pki), folder / "coordinator.pem", folder / "coordinator-key.pem")
