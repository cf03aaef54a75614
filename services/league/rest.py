"""The league's REST API (FastAPI, OpenAPI at /docs) and its web dashboard, under the one name the coordinator,
the CLI and the docs use: leaderboard, rating curves, lineage, match log, payoff, the run's progress and problems,
and bearer-token writes.

The parts live in modules named for them: rest_validation (what a request may hold), rest_schemas and
rest_run_schemas (what a read answers), rest_cache (the read cache), rest_league (the league's reads),
rest_dashboard (the run's views and the page), rest_writes (the writes), rest_app (the app) and rest_server (uvicorn).
"""

from services.league.rest_app import create_app
from services.league.rest_dashboard import PAGE_HEADERS, STATIC_DIR
from services.league.rest_server import LeagueRestServer, dashboard_server
from services.league.rest_validation import MAX_BODY_BYTES

__all__ = ["MAX_BODY_BYTES", "PAGE_HEADERS", "STATIC_DIR", "LeagueRestServer", "create_app", "dashboard_server"]
