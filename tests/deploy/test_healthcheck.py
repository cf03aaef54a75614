"""`python -m populora.healthcheck`: exit 0 only when the gRPC health service answers SERVING."""

from __future__ import annotations

import subprocess
import sys

import pytest
from grpc_health.v1 import health_pb2

from populora import healthcheck
from populora.ports import free_port
from populora.rpc import make_server
from tests.deploy.deployment import ROOT


@pytest.fixture
def server():
    srv, port, health = make_server([], 0, host="127.0.0.1")
    yield port, health
    srv.stop(grace=None)


def test_serving_is_healthy(server, capsys):
    port, _ = server
    assert healthcheck.main([f"127.0.0.1:{port}"]) == 0
    assert "SERVING" in capsys.readouterr().out


def test_not_serving_is_unhealthy(server, capsys):
    port, health = server
    health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert healthcheck.main([f"127.0.0.1:{port}"]) == 1
    assert "NOT_SERVING" in capsys.readouterr().err


def test_nothing_listening_is_unhealthy(capsys):
    assert healthcheck.main([f"127.0.0.1:{free_port()}", "--timeout", "1"]) == 1
    assert "no answer" in capsys.readouterr().err


def test_port_from_the_configuration(server, tmp_path, monkeypatch):
    """No address: the port of $POPULORA_SERVICE in $POPULORA_CONFIG (+ POPULORA__* overrides), as in the image."""
    port, _ = server
    config = tmp_path / "config.yaml"
    config.write_text("services:\n  league: {port: 1, rest_port: 8080}\n")
    monkeypatch.setenv("POPULORA_CONFIG", str(config))
    monkeypatch.setenv("POPULORA_SERVICE", "league")
    monkeypatch.setenv("POPULORA__SERVICES__LEAGUE__PORT", str(port))
    assert healthcheck.main([]) == 0
    monkeypatch.delenv("POPULORA__SERVICES__LEAGUE__PORT")
    assert healthcheck.main(["--timeout", "1"]) == 1


def test_unknown_service_says_what_to_do(monkeypatch, capsys):
    monkeypatch.delenv("POPULORA_SERVICE", raising=False)
    assert healthcheck.main([]) == 1
    assert "POPULORA_SERVICE" in capsys.readouterr().err


def test_runs_as_a_module_without_importing_torch(server):
    """The check runs every few seconds in every container: it must stay light (no torch import)."""
    port, _ = server
    code = (f"import sys, runpy; sys.argv = ['healthcheck', '127.0.0.1:{port}'];"
            "rc = 0\ntry: runpy.run_module('populora.healthcheck', run_name='__main__')\n"
            "except SystemExit as e: rc = e.code\n"
            "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
