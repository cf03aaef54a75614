"""A Postgres role per service (coordinator.pgroles), on the real server: `setup` as the superuser makes the roles, a
fresh schema the league's role owns, the tables (the league's migrations, the journal's, the registry's) and the
grants; then each role, logged in as itself, can do what its service does and nothing more: the reader and the
sandbox write nothing, the sandbox reads the verifier registry alone, the coordinator its journal alone, and none
but the league creates anything. Temporary roles and schema, removed afterwards."""

from __future__ import annotations

import uuid

import psycopg
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from coordinator import pgroles
from coordinator.run.journal import JournalDB
from populora.config import load_config
from services.league.db import LeagueDB
from services.league.rest import create_app
from services.league.service import LeagueService
from services.sandbox.registry import VerifierRegistry
from tests.conftest import PG_URL, need_server

SERVER = "127.0.0.1:5432/test"


def _url(role: str) -> str:
    return f"postgresql+psycopg://{role}@{SERVER}"


def _admin():
    return psycopg.connect(pgroles._conninfo(PG_URL), autocommit=True)


@pytest.fixture
def roles():
    """Setup run twice (the second changes nothing) for four new roles and a new schema; everything dropped after."""
    need_server("Postgres", 5432)
    tag = f"pgr_{uuid.uuid4().hex[:10]}"
    urls = {kind: _url(f"{tag}_{kind}") for kind in pgroles.ROLES}
    with _admin() as admin:
        temp_was_public = admin.execute(
            "SELECT has_database_privilege('public', current_database(), 'TEMPORARY')").fetchone()[0]
    try:
        pgroles.setup(PG_URL, urls, schema=tag)
        made = pgroles.setup(PG_URL, urls, schema=tag)
        yield tag, urls, made
    finally:
        with _admin() as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{tag}" CASCADE')
            for kind in pgroles.ROLES:
                name = f"{tag}_{kind}"
                if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
                    admin.execute(f'DROP OWNED BY "{name}" CASCADE')
                    admin.execute(f'DROP ROLE "{name}"')
            if temp_was_public:
                admin.execute("GRANT TEMPORARY ON DATABASE test TO PUBLIC")


def _can(url: str, statement: str) -> bool:
    """Whether the role of `url` may run `statement` (rolled back either way)."""
    with psycopg.connect(pgroles._conninfo(url)) as conn:
        try:
            conn.execute(statement)
            return True
        except psycopg.errors.InsufficientPrivilege:
            return False
        finally:
            conn.rollback()


def test_each_role_does_what_its_service_does_and_nothing_more(roles):
    tag, urls, made = roles
    league = LeagueDB(urls["league"])
    assert league.create_run("r1", "population")
    league.close()
    journal = JournalDB(urls["coordinator"])  # finds its tables; creates none
    journal.create_run("r1", "population", "cfg: 1")
    assert journal.get_run("r1")["config_yaml"] == "cfg: 1"
    journal.close()
    owner_only = VerifierRegistry(urls["league"])
    owner_only.register("checker", "https://checker:9000/check", ["code_o"])
    owner_only.close()

    everything = {
        "read league": "SELECT * FROM league_runs", "write league": "INSERT INTO league_runs (run_id) VALUES ('x')",
        "delete league": "DELETE FROM league_runs", "read journal": "SELECT * FROM coord_runs",
        "write journal": "UPDATE coord_runs SET status = 'x'", "read registry": "SELECT * FROM external_verifiers",
        "write registry": "DELETE FROM external_verifiers", "create table": "CREATE TABLE mine (x int)",
        "create in public": "CREATE TABLE public.mine (x int)", "temporary table": "CREATE TEMP TABLE mine (x int)",
        "drop journal": "DROP TABLE coord_phases", "drop league": "DROP TABLE league_runs CASCADE",
    }
    may = {
        "league": {"read league", "write league", "delete league", "read journal", "write journal", "read registry",
                   "write registry", "create table", "drop journal", "drop league"},
        "reader": {"read league"},
        "sandbox": {"read registry"},
        "coordinator": {"read journal", "write journal"},
    }
    seen = {kind: {what for what, sql in everything.items() if _can(urls[kind], sql)} for kind in pgroles.ROLES}
    assert seen == may
    with _admin() as admin:
        for role in made.values():
            flags = admin.execute("SELECT rolsuper, rolcreatedb, rolcreaterole, rolinherit, rolreplication, "
                                  "rolbypassrls, rolcanlogin FROM pg_roles WHERE rolname = %s", (role.name,)).fetchone()
            assert flags == (False, False, False, False, False, False, True), role.name
    # the sandbox's registry reads; its writes are refused by the database itself
    registry = VerifierRegistry(urls["sandbox"])
    try:
        assert [v.name for v in registry.list()] == ["checker"]
        with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
            registry.register("mine", "https://evil:1/always-right", ["code_o"])
        with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
            registry.delete("checker")
    finally:
        registry.close()


def test_the_reader_reads_what_the_league_adds_later_and_serves_the_league_reads(roles, tmp_path):
    tag, urls, _ = roles
    with psycopg.connect(pgroles._conninfo(urls["league"]), autocommit=True) as owner:
        owner.execute("CREATE TABLE league_later (x int)")  # a later migration's table
    assert _can(urls["reader"], "SELECT * FROM league_later")
    assert not _can(urls["reader"], "INSERT INTO league_later VALUES (1)")
    # the league writes as the owner and reads through the reader (league.read_db_url)
    cfg = load_config(env=False, overrides=[f"run.output_dir={tmp_path}", f"league.db_url={urls['league']}",
                                            f"league.read_db_url={urls['reader']}"])
    from populora.pb import league_pb2

    service = LeagueService.from_config(cfg)
    try:
        assert str(service.db.read_engine.url).startswith(f"postgresql+psycopg://{tag}_reader@")
        assert service.CreateRun(league_pb2.CreateRunRequest(run_id="r2", mode="population")).created
        with TestClient(create_app(service)) as client:
            assert [r["run_id"] for r in client.get("/v1/runs").json()] == ["r2"]
    finally:
        service.close()
    # the dashboard on the reader alone: reads, never writes
    reader = LeagueService.from_config(cfg, urls["reader"], migrate=False)
    try:
        with TestClient(create_app(reader, read_only=True)) as client:
            assert client.get("/v1/runs/r2/leaderboard").status_code == 200
        with pytest.raises(Exception, match="permission denied"):
            reader.CreateRun(league_pb2.CreateRunRequest(run_id="r3", mode="population"))
    finally:
        reader.close()


def test_wait_sees_a_roles_tables_and_says_what_is_missing(roles):
    _, urls, _ = roles
    assert pgroles.wait(urls["coordinator"], pgroles.JOURNAL_TABLES, 5, print)
    assert pgroles.wait(urls["sandbox"], pgroles.NEEDS["sandbox"], 5, print)
    said = []
    assert not pgroles.wait(_url(f"nobody_{uuid.uuid4().hex[:8]}"), (), 0, said.append)
    assert "coordinator.pgroles setup" in said[0]
    said.clear()
    assert not pgroles.wait(urls["reader"], ("coord_runs",), 0, said.append)
    assert "no privilege on coord_runs" in said[0]


def test_setup_refuses_urls_that_cannot_work():
    need_server("Postgres", 5432)
    urls = {kind: _url(f"x_{kind}") for kind in pgroles.ROLES}
    with pytest.raises(pgroles.SetupError, match="a role of its own"):
        pgroles.setup(PG_URL, {**urls, "reader": urls["league"]})
    with pytest.raises(pgroles.SetupError, match="same database"):
        pgroles.setup(PG_URL, {**urls, "sandbox": "postgresql+psycopg://x_sandbox@127.0.0.1:5432/other"})
    with pytest.raises(pgroles.SetupError, match="coordinator"):
        pgroles.setup(PG_URL, {k: v for k, v in urls.items() if k != "coordinator"})
    with pytest.raises(pgroles.SetupError, match="role name"):
        pgroles.setup(PG_URL, {**urls, "league": "postgresql+psycopg://Bad-Name@127.0.0.1:5432/test"})
    with pytest.raises(pgroles.SetupError, match="admin URL's role"):
        pgroles.setup(_url("x_league"), urls)


def test_verifiers_are_registered_by_the_owner_and_the_sandbox_only_reads_them(roles, tmp_path, capsys):
    from coordinator.cli import main as cli_main
    from populora.access import Access
    from populora.config import SandboxConfig, TasksConfig
    from services.sandbox.rest import create_app as sandbox_app
    from services.sandbox.service import SandboxService
    from tests.security.test_scopes import TOKENS, VERIFIERS

    _, urls, _ = roles
    out = [f"run.output_dir={tmp_path}"]
    assert cli_main(["verifiers", "add", "checker", "https://checker:9000/check", "--task-type", "code_o",
                     "--set", f"league.db_url={urls['league']}", *(f"--set={o}" for o in out)]) == 0
    assert cli_main(["verifiers", "add", "evil", "https://evil:1/x", "--task-type", "code_o",
                     "--set", f"sandbox.db_url={urls['sandbox']}", *(f"--set={o}" for o in out)]) == 2
    assert "may not write the verifier registry" in capsys.readouterr().err
    registry = VerifierRegistry(urls["sandbox"])
    service = SandboxService(None, TasksConfig(timeout_s=0.5), SandboxConfig(), registry)
    try:
        with TestClient(sandbox_app(service, access=Access(tokens=VERIFIERS))) as client:
            auth = {"Authorization": f"Bearer {TOKENS['coordinator']}"}
            assert [v["name"] for v in client.get("/v1/verifiers", headers=auth).json()] == ["checker"]
            made = client.post("/v1/verifiers", headers=auth, json={"name": "evil", "url": "https://evil:1/x",
                                                                     "task_types": ["code_o"]})
            assert made.status_code == 409 and "populora verifiers" in made.json()["detail"]
            assert client.delete("/v1/verifiers/checker", headers=auth).status_code == 409
        assert [v.name for v in registry.list()] == ["checker"]
    finally:
        service.external.close()
        registry.close()


def test_the_leagues_record_of_a_run_holds_no_password():
    """The league's copy of a run's config (CreateRun, readable by the reader's role) has the URLs without their
    passwords; the journal's own copy (the coordinator's role alone) keeps them for a resume."""
    from populora.config.schema import public_yaml

    cfg = load_config(env=False, overrides=[
        "league.db_url=postgresql+psycopg://populora_coordinator:pg-secret@postgres:5432/populora?sslmode=require",
        "league.read_db_url=postgresql+psycopg://populora_reader:read-secret@postgres:5432/populora",
        "queue.redis_url=rediss://coordinator:redis-secret@redis:6379/0"])
    shown = public_yaml(cfg)
    assert not any(s in shown for s in ("pg-secret", "read-secret", "redis-secret"))
    assert "populora_coordinator:***@postgres:5432/populora?sslmode=require" in shown
    assert "pg-secret" in cfg.to_yaml()
