"""Schema fuzzing of the league's REST API with schemathesis, against the real service on Postgres, token included:
no server error, no status code its OpenAPI schema does not document, no response that breaks its schema, every
schema-valid request accepted and every invalid one refused (issue 13)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from populora.pb import league_pb2 as pb
from populora.ports import free_port
from services.league.rest import LeagueRestServer
from tests.league.conftest import make_service
from tests.league.test_league_api import _season

TOKEN = "fuzz-token"
CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.mark.slow
@pytest.mark.postgres
def test_schema_fuzzing_finds_no_server_error_and_no_undocumented_status(pg_url, tmp_path):
    service = make_service(pg_url, token=TOKEN)
    _season(service)  # ids for the stateful phase to find and follow
    service.RecordEvals(pb.RecordEvalsRequest(run_id="r1", scores=[  # scores for the eval reads to serialise
        pb.EvalScore(adapter_id=a, version=1, benchmark="heldout", step=1, label=a or "base", n_problems=1, samples=1,
                     pass_at_1=0.5 if a else 0.0, pass_at_k={1: 0.5 if a else 0.0},
                     problems=[pb.EvalProblem(problem_id="p0", passed=1 if a else 0, n=1, error="" if a else "x")])
        for a in ("", "T0", "S0")]))
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
