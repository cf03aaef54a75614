"""/metrics of the services without a REST app (inference, trainer, evolver) under services.tls: HTTPS with the
service's certificate, checked against the CA under the service's name; plain HTTP is refused. /metrics is the
service's `Read` (populora.scopes): over HTTPS the caller is the identity its client certificate names, and only a
reader's (the dashboard's) is answered."""

from __future__ import annotations

import ssl
import time

import httpx
import pytest

from populora import certs
from populora.metrics import start_metrics_server
from populora.ports import free_port
from populora.tls import TlsFiles


def _client(folder, identity: str | None) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(folder / "ca.pem"))
    if identity:
        ctx.load_cert_chain(folder / f"{identity}.pem", folder / f"{identity}-key.pem")
    return httpx.Client(verify=ctx, timeout=10)


def test_metrics_serve_https_only_with_tls_to_a_reader(tmp_path):
    certs.write_certs(tmp_path, ["evolver", "coordinator", "dashboard", "sandbox"], days=1, hosts=["127.0.0.1"])
    files = TlsFiles("evolver", tmp_path / "ca.pem", tmp_path / "evolver.pem", tmp_path / "evolver-key.pem")
    port = free_port()
    server = start_metrics_server(port, "127.0.0.1", files, "evolver")
    url = f"https://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with _client(tmp_path, "dashboard") as client:
                    resp = client.get(url, extensions={"sni_hostname": "evolver"})
                break
            except httpx.ConnectError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert resp.status_code == 200 and "# TYPE" in resp.text
        with _client(tmp_path, None) as client:  # no certificate: nobody named
            anonymous = client.get(url)
        assert anonymous.status_code == 401 and "# TYPE" not in anonymous.text
        for identity in ("coordinator", "sandbox"):  # named, but no reader of the evolver
            with _client(tmp_path, identity) as client:
                refused = client.get(url)
            assert refused.status_code == 403 and f"{identity} may not call Evolver.Read" in refused.json()["detail"]
        with pytest.raises(httpx.HTTPError):  # plain HTTP to the HTTPS port
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        with _client(tmp_path, "dashboard") as client, pytest.raises(httpx.ConnectError):  # another name
            client.get(url, extensions={"sni_hostname": "league"})
    finally:
        server.should_exit = True


def test_plaintext_metrics_are_open_and_a_port_in_use_is_an_error(tmp_path):
    port = free_port()
    server = start_metrics_server(port, "127.0.0.1", None, "trainer")
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 200
        with pytest.raises(OSError, match="cannot listen"):
            start_metrics_server(port, "127.0.0.1", None, "trainer")
    finally:
        server.should_exit = True
