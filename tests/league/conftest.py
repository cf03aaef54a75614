"""League fixtures: the same tests run against the real Postgres server and against a SQLite file."""

from __future__ import annotations

import pytest

from services.league.db import LeagueDB
from services.league.engine import RatingRules
from services.league.service import LeagueService


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
