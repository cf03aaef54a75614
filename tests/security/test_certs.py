"""`populora certs`: a CA and one certificate per identity of the deployment, each naming its identity, signed by
the CA, valid as long as asked, its key readable by its owner only; a second run keeps the CA."""

from __future__ import annotations

import datetime as dt
import stat

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from coordinator.cli import main
from populora import certs
from populora.contracts import SERVICE_NAMES
from populora.scopes import IDENTITIES


def _load(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_every_service_and_client_has_an_identity():
    assert set(SERVICE_NAMES) <= set(IDENTITIES)
    assert {"coordinator", "dashboard", "verifier"} <= set(IDENTITIES)
    assert len(set(IDENTITIES)) == len(IDENTITIES)


def test_certs_command_writes_a_ca_and_a_certificate_per_identity(tmp_path, capsys):
    out = tmp_path / "certs"
    assert main(["certs", "--dir", str(out), "--days", "3", "--host", "localhost", "--host", "10.0.0.7"]) == 0
    assert "services.tls.dir" in capsys.readouterr().out
    ca = _load(certs.ca_file(out))
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for name in IDENTITIES:
        cert = _load(certs.cert_file(out, name))
        cert.verify_directly_issued_by(ca)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == name
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert san.get_values_for_type(x509.DNSName) == [name, "localhost"]
        assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.7"]
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usage)
        life = cert.not_valid_after_utc - cert.not_valid_before_utc
        assert dt.timedelta(days=3) == life
        assert stat.S_IMODE(certs.key_file(out, name).stat().st_mode) == 0o600
    assert stat.S_IMODE(certs.key_file(out, "ca").stat().st_mode) == 0o600


def test_a_second_run_keeps_the_ca_unless_told(tmp_path):
    certs.write_certs(tmp_path, ["league"], days=1)
    first = certs.ca_file(tmp_path).read_bytes()
    old_league = certs.cert_file(tmp_path, "league").read_bytes()
    written = certs.write_certs(tmp_path, ["sandbox"], days=1)
    assert certs.ca_file(tmp_path).read_bytes() == first
    assert written == [certs.key_file(tmp_path, "sandbox"), certs.cert_file(tmp_path, "sandbox")]
    assert certs.cert_file(tmp_path, "league").read_bytes() == old_league
    _load(certs.cert_file(tmp_path, "sandbox")).verify_directly_issued_by(_load(certs.ca_file(tmp_path)))
    certs.write_certs(tmp_path, ["sandbox"], days=1, new_ca=True)
    assert certs.ca_file(tmp_path).read_bytes() != first


def test_an_unknown_identity_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["certs", "--dir", str(tmp_path), "--name", "mallory"])
    assert exit_.value.code == 2 and "mallory" in capsys.readouterr().err
    with pytest.raises(ValueError, match="mallory.*coordinator"):
        certs.write_certs(tmp_path, ["mallory"])
    assert not certs.cert_file(tmp_path, "mallory").exists()


def test_the_data_stores_get_server_certificates_and_are_no_identity(tmp_path):
    """Postgres and Redis (by their service names) get a certificate of the same CA, by default and by --name; neither
    is an identity, so no gRPC server takes a call presenting one (populora.access)."""
    assert main(["certs", "--dir", str(tmp_path), "--days", "1"]) == 0
    for name in certs.DATA_STORES:
        cert = _load(certs.cert_file(tmp_path, name))
        cert.verify_directly_issued_by(_load(certs.ca_file(tmp_path)))
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == name
        assert name not in IDENTITIES
    assert main(["certs", "--dir", str(tmp_path / "one"), "--name", "redis"]) == 0
    assert sorted(p.name for p in (tmp_path / "one").glob("*.pem")) == ["ca-key.pem", "ca.pem", "redis-key.pem",
                                                                        "redis.pem"]
