"""How users reach the dashboard: `populora dashboard` over a run database, `populora train --dashboard` beside a
run (the same read-only server)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from coordinator.cli import build_parser, main
from populora.config import load_config
from populora.ports import free_port
from services.league.rest import dashboard_server


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read()


def test_dashboard_of_a_missing_database_is_an_error(tmp_path, capsys):
    assert main(["dashboard", "--preset", "cpu-tiny", "--set", f"run.output_dir={tmp_path / 'nothing'}"]) == 2
    assert "no run database at" in capsys.readouterr().err
    assert not (tmp_path / "nothing").exists()  # nothing created


def test_train_dashboard_flag_and_server_beside_a_run(tmp_path):
    args = build_parser().parse_args(["train", "--preset", "cpu-tiny", "--dashboard"])
    assert args.dashboard == 8080
    assert build_parser().parse_args(["train", "--dashboard", "9123"]).dashboard == 9123
    assert build_parser().parse_args(["train"]).dashboard is None
    cfg = load_config(preset="cpu-tiny", overrides=[f"run.output_dir={tmp_path}"], env=False)
    server = dashboard_server(cfg, port=free_port(), existing=False).start()  # before the run creates anything
    try:
        assert _get(server.url + "v1/runs") == (200, b"[]")
        status, page = _get(server.url)
        assert status == 200 and b"/static/dashboard.js" in page
        req = urllib.request.Request(server.url + "v1/runs", data=b'{"run_id": "x"}', method="POST",
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 405  # read-only: no write endpoint at all
    finally:
        server.stop()


@pytest.mark.slow
def test_populora_dashboard_serves_a_finished_run(short_run):
    port = free_port()
    output_dir = short_run.root / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "dashboard", "--run", short_run.run_id,
                             "--port", str(port), "--preset", "cpu-tiny", "--set", f"run.output_dir={output_dir}",
                             "--set", f"league.db_url={short_run.url}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/#/overview/{short_run.run_id}" in line, line
        deadline = time.monotonic() + 60
        while True:
            try:
                status, body = _get(f"http://127.0.0.1:{port}/v1/runs/{short_run.run_id}/overview")
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
                time.sleep(0.2)
        overview = json.loads(body)
        assert status == 200 and overview["journal"] and overview["latest_step"]["step"] >= 2
    finally:
        proc.terminate()
        proc.wait(20)
