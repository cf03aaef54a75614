"""/metrics of the services without a REST app (inference, trainer, evolver) under services.tls: HTTPS with the
service's certificate, checked against the CA under the service's name; plain HTTP is refused."""

from __future__ import annotations

import ssl
import time

import httpx
import pytest

from populora import certs
from populora.metrics import start_metrics_server
from populora.ports import free_port
from populora.tls import TlsFiles


def test_metrics_serve_https_only_with_tls(tmp_path):
    certs.write_certs(tmp_path, ["evolver", "coordinator"], days=1)
    files = TlsFiles("evolver", tmp_path / "ca.pem", tmp_path / "evolver.pem", tmp_path / "evolver-key.pem")
    port = free_port()
    start_metrics_server(port, "127.0.0.1", files)
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    url = f"https://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 10
    while True:
        try:
            with httpx.Client(verify=ctx, timeout=10) as client:
                resp = client.get(url, extensions={"sni_hostname": "evolver"})
            break
        except httpx.ConnectError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert resp.status_code == 200 and "# TYPE" in resp.text
    with pytest.raises(httpx.HTTPError):  # plain HTTP to the HTTPS port
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    with httpx.Client(verify=ctx, timeout=10) as client, pytest.raises(httpx.ConnectError):  # another name
        client.get(url, extensions={"sni_hostname": "league"})
