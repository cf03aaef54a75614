"""Bad build setups get clear errors, checked without a container engine: scripts/images.sh against a stand-in
`docker` CLI (no Docker, a daemon that is down, no BuildKit, a base image that cannot be pulled, no root for
debootstrap), and scripts/image_pip.py against a real HTTPS server whose certificate is not trusted (the
TLS-intercepting proxy case), trusted through the CA secret, and unreachable."""

from __future__ import annotations

import http.server
import os
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.deploy.deployment import ROOT

IMAGES_SH = ROOT / "scripts" / "images.sh"
FAKE_DOCKER = """#!/bin/bash
case "$1" in
  info) [ "$FAKE_DAEMON" = up ] && exit 0
        echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2
        exit 1 ;;
  version) echo "$FAKE_VERSION" ;;
  pull) echo "Error response from daemon: Get https://registry-1.docker.io/v2/: dial tcp: lookup failed" >&2
        exit 1 ;;
  *) exit 1 ;;  # buildx: not installed; image inspect: no such image
esac
"""
FAKE_ID = """#!/bin/sh
if [ "$1" = -u ]; then echo "$FAKE_UID"; else exec /usr/bin/id "$@"; fi
"""


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory) -> Path:
    """A PATH of this machine's commands minus every docker, dockerd and id (the tests put stand-ins in front)."""
    path = tmp_path_factory.mktemp("bin")
    for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            if name.startswith(("docker", "id")) or (path / name).exists():
                continue
            os.symlink(os.path.join(d, name), path / name)
    return path


def images_sh(bin_dir: Path, tmp_path: Path, docker: bool = True, daemon: str = "down", version: str = "28.2.2",
              uid: str = "0", **env: str) -> subprocess.CompletedProcess:
    fakes = tmp_path / "fakes"
    fakes.mkdir(exist_ok=True)
    (fakes / "id").write_text(FAKE_ID)
    if docker:
        (fakes / "docker").write_text(FAKE_DOCKER)
    for f in fakes.iterdir():
        f.chmod(0o755)
    full = {"PATH": f"{fakes}:{bin_dir}", "HOME": str(tmp_path), "FAKE_DAEMON": daemon, "FAKE_VERSION": version,
            "FAKE_UID": uid, **env}
    out = subprocess.run(["bash", str(IMAGES_SH)], env=full, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0, f"images.sh succeeded with a broken setup:\n{out.stderr}"
    return out


def test_no_docker(bin_dir, tmp_path):
    err = images_sh(bin_dir, tmp_path, docker=False).stderr
    assert "Docker is not installed" in err and "docker.io" in err


def test_daemon_down_and_not_root(bin_dir, tmp_path):
    err = images_sh(bin_dir, tmp_path, daemon="down", uid="1000").stderr
    assert "Docker daemon" in err and "root" in err, err


def test_daemon_down_and_no_dockerd(bin_dir, tmp_path):
    err = images_sh(bin_dir, tmp_path, daemon="down", uid="0").stderr
    assert "dockerd is not installed" in err, err


def test_no_buildkit(bin_dir, tmp_path):
    err = images_sh(bin_dir, tmp_path, daemon="up", version="28.2.2").stderr
    assert "needs BuildKit" in err and "buildx" in err, err


def test_missing_base_image_that_cannot_be_pulled(bin_dir, tmp_path):
    err = images_sh(bin_dir, tmp_path, daemon="up", version="20.10.24", LOCAL_BASE="0").stderr
    assert "python:3.11-slim-bookworm is not on this machine and cannot be pulled" in err and "LOCAL_BASE=1" in err


def test_local_base_needs_root(bin_dir, tmp_path):
    err = images_sh(bin_dir, tmp_path, daemon="up", version="20.10.24", LOCAL_BASE="1", uid="1000").stderr
    assert "needs root (debootstrap)" in err, err


def test_bad_local_base_value(bin_dir, tmp_path):
    err = images_sh(bin_dir, tmp_path, daemon="up", version="20.10.24", LOCAL_BASE="maybe").stderr
    assert "LOCAL_BASE must be 1, 0 or auto" in err, err


# ---- pip inside the build ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def https_server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """An HTTPS server on loopback with a self-signed certificate (what a TLS-intercepting proxy looks like to a
    client without its CA): (its URL, the certificate)."""
    if not shutil.which("openssl"):
        pytest.fail("openssl is not installed (apt-get install openssl)")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=proxy",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}/simple", cert
    server.shutdown()


@contextmanager
def image_pip(tmp_path: Path, monkeypatch, secret: bytes | None) -> Iterator:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import image_pip as module
    finally:
        sys.path.pop(0)
    bundle_dir = tmp_path / "run-ca"
    bundle_dir.mkdir()
    monkeypatch.setattr(module, "BUNDLE_DIR", str(bundle_dir))
    monkeypatch.setattr(module, "SECRET", str(tmp_path / "secret-ca"))
    if secret is not None:
        (tmp_path / "secret-ca").write_bytes(secret)
    yield module


def test_untrusted_index_says_to_give_the_ca_bundle(https_server, tmp_path, monkeypatch):
    url, _ = https_server
    with image_pip(tmp_path, monkeypatch, None) as module:
        assert module.ca_bundle() is None
        why = module.probe(url, None)
    assert "not trusted" in why and "intercepts TLS" in why and "CA_BUNDLE=" in why and "--secret id=ca" in why


def test_ca_secret_makes_the_index_trusted(https_server, tmp_path, monkeypatch):
    url, cert = https_server
    with image_pip(tmp_path, monkeypatch, cert.read_bytes()) as module:
        bundle = module.ca_bundle()
        assert bundle and bundle.startswith(str(tmp_path / "run-ca")), "the bundle is written to the tmpfs only"
        assert module.probe(url, bundle) is None
        text = Path(bundle).read_bytes()
        assert text.endswith(cert.read_bytes()) and text.count(b"BEGIN CERTIFICATE") > 1, "system CAs + the secret"


def test_wrong_ca_secret_is_named(https_server, tmp_path, monkeypatch):
    url, _ = https_server
    other = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                            "/CN=other", "-keyout", str(tmp_path / "k"), "-out", "/dev/stdout"],
                           check=True, capture_output=True).stdout
    with image_pip(tmp_path, monkeypatch, other) as module:
        why = module.probe(url, module.ca_bundle())
    assert "even with the CA bundle given" in why


def test_secret_that_is_no_certificate(tmp_path, monkeypatch):
    with image_pip(tmp_path, monkeypatch, b"not a certificate") as module, pytest.raises(SystemExit) as e:
        module.ca_bundle()
    assert "no PEM certificate" in str(e.value)


def test_unreachable_index(tmp_path, monkeypatch):
    with image_pip(tmp_path, monkeypatch, None) as module:
        why = module.probe("https://127.0.0.1:9/simple", None)
    assert "cannot reach the package index https://127.0.0.1:9/simple" in why and "PIP_INDEX_URL" in why


def test_every_index_of_the_command_is_checked(tmp_path, monkeypatch):
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    with image_pip(tmp_path, monkeypatch, None) as module:
        assert module.indexes(["install", "x"]) == ["https://pypi.org/simple"]
        assert module.indexes(["install", "--index-url", "https://a/simple", "--extra-index-url=https://b",
                               "x"]) == ["https://a/simple", "https://b"]
        assert module.indexes(["install", "--no-index", "--find-links", "/wheels", "x"]) == []
        monkeypatch.setenv("PIP_INDEX_URL", "https://mirror/simple")
        assert module.indexes(["install", "x"]) == ["https://mirror/simple"]
