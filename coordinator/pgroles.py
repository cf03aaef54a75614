"""A Postgres role per service of a deployment, each able to do what its service does and nothing more, in one schema
the league owns.

| role        | who connects with it                           | may                                                   |
|-------------|------------------------------------------------|-------------------------------------------------------|
| league      | the league (`league.db_url`)                   | own the schema: make and migrate its tables, read and |
|             |                                                | write them                                            |
| reader      | the league's reads, `populora dashboard`       | SELECT the league's tables (league_*,                 |
|             | (`league.read_db_url`)                         | alembic_version), now and as migrations add them      |
| sandbox     | the verifier registry (`sandbox.db_url`)       | SELECT external_verifiers                             |
| coordinator | its journal (its `league.db_url`)              | SELECT, INSERT, UPDATE, DELETE coord_runs and         |
|             |                                                | coord_phases                                          |

No role may create anything outside the league's, and none but the league may use a table it was not given (the
reader not the journal nor the registry, whose URLs may carry a key; the sandbox, which runs model-written code,
nothing but reading the registry). A verifier is registered by the owner (`populora verifiers`, with the league's
URL), since the sandbox cannot write its registry.

    POPULORA_PG_ADMIN_URL=postgresql+psycopg://populora:...@postgres:5432/populora \\
    POPULORA_PG_LEAGUE_URL=postgresql+psycopg://populora_league:...@postgres:5432/populora \\
    POPULORA_PG_READER_URL=... POPULORA_PG_SANDBOX_URL=... POPULORA_PG_COORDINATOR_URL=... \\
      python -m coordinator.pgroles setup [--schema populora]

`setup`, as the database's superuser (ADMIN, the one credential only this step holds), again at every upgrade (it
changes nothing that is right already): each role is created with the password of its URL (or given it again),
logs in with the schema as its search path and holds no attribute (no SUPERUSER, CREATEDB, CREATEROLE, INHERIT,
REPLICATION, BYPASSRLS); the schema is made, owned by the league's role; then, as that role, the league's migrations
run and the journal's and the registry's tables are made; last the grants above. Each variable NAME may instead be
given as NAME_FILE, a file holding the value (a container's secret). Every URL must name the same database; a role
given twice is an error.

`python -m coordinator.pgroles wait SERVICE` (league, sandbox or coordinator; a Kubernetes init container) waits until
the service's own URL (from its configuration, as `populora serve` reads it) logs in and sees the tables it is given.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

ROLES = ("league", "reader", "sandbox", "coordinator")
LEAGUE_TABLE = re.compile(r"^(league_|alembic_version$)")
JOURNAL_TABLES = ("coord_runs", "coord_phases")
REGISTRY_TABLE = "external_verifiers"
# what each service's role must see before it starts (`wait`)
NEEDS = {"league": (), "sandbox": (REGISTRY_TABLE,), "coordinator": JOURNAL_TABLES}
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class SetupError(RuntimeError):
    """Roles that cannot be set up as asked: the message says which and why."""


@dataclass(frozen=True)
class Role:
    name: str
    password: str | None
    url: str


def _conninfo(url: str) -> str:
    """libpq's URI of a SQLAlchemy URL (postgresql+psycopg://... -> postgresql://...), its query (sslmode, ...) kept."""
    import sqlalchemy as sa

    return sa.engine.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _role(kind: str, url: str) -> Role:
    import sqlalchemy as sa

    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError as e:
        raise SetupError(f"the {kind} URL cannot be read: {e}") from None
    if parsed.get_backend_name() != "postgresql":
        raise SetupError(f"the {kind} URL is not a Postgres URL (postgresql+psycopg://ROLE:PASSWORD@HOST/DB)")
    if not parsed.username or not _NAME.fullmatch(parsed.username):
        raise SetupError(f"the {kind} URL's user {parsed.username!r} is no role name of lower-case letters, digits "
                         "and _ (at most 63)")
    return Role(parsed.username, parsed.password, url)


def _database(url: str) -> tuple:
    import sqlalchemy as sa

    parsed = sa.engine.make_url(url)
    return parsed.host, parsed.port or 5432, parsed.database


def _ident(name: str):
    from psycopg import sql

    return sql.Identifier(name)


def _run(conn, statement, *args) -> None:
    from psycopg import sql

    conn.execute(sql.SQL(statement).format(*args))


def _create_roles(admin, schema: str, roles: dict[str, Role]) -> None:
    from psycopg import sql

    for role in roles.values():
        exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role.name,)).fetchone()
        password = sql.Literal(role.password) if role.password is not None else sql.SQL("NULL")
        attributes = sql.SQL("LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS "
                             "PASSWORD {}").format(password)
        verb = sql.SQL("ALTER ROLE" if exists else "CREATE ROLE")
        admin.execute(sql.SQL("{} {} {}").format(verb, _ident(role.name), attributes))
        _run(admin, "ALTER ROLE {} SET search_path = {}", _ident(role.name), _ident(schema))
    league = roles["league"].name
    _run(admin, "CREATE SCHEMA IF NOT EXISTS {} AUTHORIZATION {}", _ident(schema), _ident(league))
    _run(admin, "ALTER SCHEMA {} OWNER TO {}", _ident(schema), _ident(league))
    _run(admin, "REVOKE ALL ON SCHEMA {} FROM PUBLIC", _ident(schema))
    _run(admin, "REVOKE CREATE ON SCHEMA public FROM PUBLIC")  # Postgres 15's default, said for older ones
    database = admin.execute("SELECT current_database()").fetchone()[0]
    _run(admin, "REVOKE TEMPORARY ON DATABASE {} FROM PUBLIC", _ident(database))
    for role in roles.values():
        _run(admin, "GRANT CONNECT ON DATABASE {} TO {}", _ident(database), _ident(role.name))
        if role.name != league:
            _run(admin, "REVOKE CREATE ON SCHEMA {} FROM {}", _ident(schema), _ident(role.name))
            _run(admin, "GRANT USAGE ON SCHEMA {} TO {}", _ident(schema), _ident(role.name))


def _make_tables(league_url: str) -> None:
    """As the league's role: its migrations, the journal's tables, the verifier registry's table."""
    import sqlalchemy as sa

    from coordinator.run.journal import JournalDB
    from services.league.db import LeagueDB
    from services.sandbox.registry import create_table

    db = LeagueDB(league_url)
    try:
        db.migrate()
    finally:
        db.close()
    JournalDB(league_url).engine.dispose()
    engine = sa.create_engine(league_url)
    try:
        create_table(engine)
    finally:
        engine.dispose()


def _grant(owner, schema: str, roles: dict[str, Role]) -> None:
    tables = [r[0] for r in owner.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename", (schema,)).fetchall()]
    missing = sorted({*JOURNAL_TABLES, REGISTRY_TABLE} - set(tables))
    if missing or not any(LEAGUE_TABLE.match(t) for t in tables):
        raise SetupError(f"schema {schema} lacks tables after the league's migrations: {missing or 'league_*'}")
    league = roles["league"].name
    given = {"reader": {t: "SELECT" for t in tables if LEAGUE_TABLE.match(t)},
             "sandbox": {REGISTRY_TABLE: "SELECT"},
             "coordinator": {t: "SELECT, INSERT, UPDATE, DELETE" for t in JOURNAL_TABLES}}
    for kind, grants in given.items():
        name = _ident(roles[kind].name)
        for table in tables:  # everything taken first, then what the role is given: a second setup changes nothing
            _run(owner, "REVOKE ALL ON TABLE {}.{} FROM {}", _ident(schema), _ident(table), name)
        for table, privileges in grants.items():
            _run(owner, "GRANT " + privileges + " ON TABLE {}.{} TO {}", _ident(schema), _ident(table), name)
    for table in tables:
        _run(owner, "REVOKE ALL ON TABLE {}.{} FROM PUBLIC", _ident(schema), _ident(table))
    # the tables a later migration adds are the reader's to read too
    _run(owner, "ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA {} GRANT SELECT ON TABLES TO {}", _ident(league),
         _ident(schema), _ident(roles["reader"].name))


def setup(admin_url: str, urls: dict[str, str], schema: str = "populora") -> dict[str, Role]:
    """Create (or bring up to date) the roles of `urls` (ROLES -> each one's URL: its user and password) and the
    schema, make the tables as the league's role, and grant each role its tables; returns the roles. SetupError for
    URLs that cannot work together."""
    import psycopg

    if sorted(urls) != sorted(ROLES):
        raise SetupError(f"give the URL of each role: {', '.join(ROLES)} (missing: "
                         f"{', '.join(sorted(set(ROLES) - set(urls))) or 'none'})")
    if not _NAME.fullmatch(schema):
        raise SetupError(f"schema {schema!r} is no name of lower-case letters, digits and _")
    roles = {kind: _role(kind, urls[kind]) for kind in ROLES}
    names = [r.name for r in roles.values()]
    if len(set(names)) != len(names):
        raise SetupError(f"each service needs a role of its own; the URLs name {names}")
    admin_role = _role("admin", admin_url)
    if admin_role.name in names:
        raise SetupError(f"the admin URL's role {admin_role.name} is a service's too: the services' roles are new ones")
    places = {kind: _database(url) for kind, url in {"admin": admin_url, **urls}.items()}
    if len(set(places.values())) != 1:
        raise SetupError("every URL must name the same database (host, port, database): " +
                         ", ".join(f"{k} {v}" for k, v in places.items()))
    with psycopg.connect(_conninfo(admin_url), autocommit=True) as admin:
        _create_roles(admin, schema, roles)
    _make_tables(urls["league"])
    with psycopg.connect(_conninfo(urls["league"]), autocommit=True) as owner:
        _grant(owner, schema, roles)
    return roles


def wait(url: str, tables: tuple[str, ...], timeout_s: float, say: Callable[[str], None] = print) -> bool:
    """Whether the role of `url` could log in and see `tables` within `timeout_s` (tried every 2 s)."""
    import psycopg

    deadline = time.monotonic() + timeout_s
    why = ""
    while True:
        try:
            with psycopg.connect(_conninfo(url), connect_timeout=5) as conn:
                seen = {t: conn.execute("SELECT CASE WHEN to_regclass(%s) IS NULL THEN NULL "
                                        "ELSE has_table_privilege(%s, 'SELECT') END", (t, t)).fetchone()[0]
                        for t in tables}
            if all(seen.values()):
                return True
            absent = [t for t, ok in seen.items() if ok is None]
            why = (f"no table {', '.join(absent)} in its search path yet" if absent else
                   f"no privilege on {', '.join(t for t, ok in seen.items() if not ok)} yet")
        except psycopg.Error as e:
            why = " ".join(str(e).split())
        if time.monotonic() > deadline:
            say(f"the database role is not ready after {timeout_s:.0f} s: {why}; has `python -m coordinator.pgroles "
                "setup` run as the database's superuser?")
            return False
        time.sleep(2)


def _env(name: str) -> str:
    """$NAME, or the content of the file $NAME_FILE names (final newline dropped); "" when neither is set."""
    value = os.environ.get(name, "")
    path = os.environ.get(f"{name}_FILE", "")
    if value and path:
        raise SetupError(f"set {name} or {name}_FILE, not both")
    if path:
        try:
            with open(path) as f:
                return f.read().rstrip("\n")
        except OSError as e:
            raise SetupError(f"{name}_FILE: cannot read {path}: {e}") from None
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m coordinator.pgroles", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("setup", help="the roles, the schema, the tables and the grants (as the superuser)")
    s.add_argument("--schema", default="populora", help="the schema of every table (default: populora)")
    w = sub.add_parser("wait", help="wait until a service's own role logs in and sees its tables")
    w.add_argument("service", choices=sorted(NEEDS))
    w.add_argument("--timeout", type=float, default=900, help="seconds (default 900)")
    args = p.parse_args(argv)
    try:
        if args.command == "setup":
            admin = _env("POPULORA_PG_ADMIN_URL")
            urls = {kind: _env(f"POPULORA_PG_{kind.upper()}_URL") for kind in ROLES}
            unset = [f"POPULORA_PG_{k.upper()}_URL" for k, v in {"admin": admin, **urls}.items() if not v]
            if unset:
                raise SetupError(f"set {', '.join(unset)} (or NAME_FILE)")
            roles = setup(admin, urls, args.schema)
            print(f"schema {args.schema}: " + ", ".join(f"{k} {r.name}" for k, r in roles.items()))
            return 0
        from populora.config import load_config

        cfg = load_config()
        url = {"league": cfg.league.db_url, "coordinator": cfg.league.db_url,
               "sandbox": cfg.sandbox.db_url or cfg.league.db_url}[args.service]
        return 0 if wait(cfg.resolve(url), NEEDS[args.service], args.timeout,
                         lambda m: print(f"{args.service}: {m}", file=sys.stderr)) else 1
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
