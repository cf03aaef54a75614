"""Alembic environment of the league database: runs on the connection the service hands it (see db.migrate),
or on `sqlalchemy.url` when run from the command line with services/league/alembic.ini."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from services.league.tables import metadata

# The league's own version table, so it can share a database (and a schema) with other services' tables.
VERSION_TABLE = "league_alembic_version"


def run_on(connection: sa.Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, version_table=VERSION_TABLE,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        run_on(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or context.config.get_main_option("sqlalchemy.url")
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        run_on(conn)
    engine.dispose()


main()
