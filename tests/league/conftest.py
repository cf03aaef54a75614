"""League fixtures: the same tests run against the real Postgres server and against a SQLite file; a real short
run for the dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from populora.ports import free_port
from services.league.db import LeagueDB
from services.league.engine import RatingRules
from services.league.rest import LeagueRestServer
from services.league.service import LeagueService
from tests.league.browser import Browser


@pytest.fixture(params=["sqlite", "postgres"])
def league_url(request, tmp_path):
    """A fresh, empty league database: a SQLite file, or a private schema on the real Postgres server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'league.sqlite'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path / 'league.sqlite'}"


def make_service(url: str, rules: RatingRules | None = None, **kwargs) -> LeagueService:
    db = LeagueDB(url, rules)
    db.migrate()
    return LeagueService(db, **kwargs)


@pytest.fixture
def league(league_url):
    """A LeagueService on a migrated database (both backends)."""
    service = make_service(league_url, token="s3cret")
    yield service
    service.close()


@dataclass
class ShortRun:
    """A real run's database: the league's tables and the coordinator's phase journal, as `populora train` leaves
    them (SQLite, embedded mode)."""

    cfg: object
    run_id: str
    url: str
    state: object
    root: Path


@pytest.fixture(scope="session")
def short_run(tmp_path_factory) -> ShortRun:
    """The cpu-tiny end-to-end run (the tiny model fitted to write valid proposals, tests/e2e): 2 of its 3 steps,
    with one evolution at step 2, its members at ranks 8 and 16 (teachers) and 32 and 64 (students), so every view
    shows several (spec 9, "Mixed ranks"). Built once per session (about a minute and a half on 2 cores)."""
    from coordinator.run.journal import JournalDB
    from coordinator.train import run_training
    from populora.config import load_config
    from tests.e2e.conftest import e2e_overrides
    from tests.e2e.echo_model import echo_model_dir

    root = tmp_path_factory.mktemp("short-run")
    cfg = load_config(preset="cpu-tiny", overrides=[*e2e_overrides(root, str(echo_model_dir())),
                                                    "lora.teacher_ranks=[8, 16]", "lora.student_ranks=[32, 64]"],
                      env=False)
    state = JournalDB(cfg.league_db_url)
    state.create_run("e2e", cfg.run.mode, cfg.to_yaml())
    cfg.run.steps = 2
    run_training(cfg, "e2e", state)
    yield ShortRun(cfg, "e2e", cfg.league_db_url, state, root)
    state.close()


@pytest.fixture(scope="module")
def browser():
    """A real headless Chromium, one per test module."""
    b = Browser()
    yield b
    b.close()


def serve_league(url: str) -> LeagueRestServer:
    """A league REST server (the dashboard) on `url`, migrated."""
    db = LeagueDB(url)
    db.migrate()
    return LeagueRestServer(LeagueService(db, read_cache_s=0.5), port=free_port()).start()


@pytest.fixture
def page(browser):
    """The browser, its console emptied before the test and checked after it: no error of any kind. The page is left
    (for about:blank) before the check, so that its polling stops and nothing it does later is charged to another
    test."""
    browser.console_errors()
    yield browser
    browser.open("about:blank")
    errors = browser.console_errors()
    assert not errors, errors
