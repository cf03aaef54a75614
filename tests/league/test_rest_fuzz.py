"""Schema fuzzing of the league's REST API with schemathesis, against the real service on Postgres, token included:
no server error, no status code its OpenAPI schema does not document, no response that breaks its schema, every
schema-valid request accepted and every invalid one refused (issue 13)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.league.rest import LeagueRestServer
from tests.conftest import free_port
from tests.league.conftest import make_service
from tests.league.test_league_api import _season

TOKEN = "fuzz-token"
CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.mark.slow
@pytest.mark.postgres
def test_schema_fuzzing_finds_no_server_error_and_no_undocumented_status(pg_url, tmp_path):
    service = make_service(pg_url, token=TOKEN)
    _season(service)  # ids for the stateful phase to find and follow
    server = LeagueRestServer(service, port=free_port(), read_only=False).start()
    operations = sum(len(methods) for methods in server.server.config.app.openapi()["paths"].values())
    try:
        cmd = [str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(CONFIG), "run",
               f"{server.url}openapi.json", "--header", f"Authorization: Bearer {TOKEN}", "--checks", "all",
               "--max-examples", "40", "--workers", "1", "--request-timeout", "30"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    finally:
        server.stop()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-12000:]
    assert f"Tested: {operations}" in out and " passed" in out, out[-3000:]  # every operation fuzzed
