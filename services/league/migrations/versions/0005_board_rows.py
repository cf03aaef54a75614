"""The leaderboard's rows serialised where they are written (Postgres only).

Revision ID: 0005
Revises: 0004

Serialising 500 rows in the leaderboard's query (to_json of the strings, floats to text, one concat per row) was
two thirds of its 1.3 ms in the database, paid by every uncached read. Each row of `league_adapters` now carries
its leaderboard JSON without the two fields that depend on the read (`rank` and `conservative_skill`, which depends
on the league's k), rebuilt by a trigger whenever the row is written: reads concatenate text, and writes, which
rewrite the row anyway, pay a few microseconds each. The column is not indexed, so the updates stay HOT (0002).
SQLite serialises in Python (services/league/reads.py) and has no such column.
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

FUNCTION = """
CREATE OR REPLACE FUNCTION league_adapters_board_json() RETURNS trigger AS $$
BEGIN
  NEW.board_json := concat(
    '"adapter_id":', to_json(NEW.adapter_id), ',"role":', to_json(NEW.role), ',"status":', to_json(NEW.status),
    ',"mu":', NEW.mu, ',"sigma":', NEW.sigma, ',"matches":', NEW.matches, ',"wins":', NEW.wins,
    ',"losses":', NEW.losses, ',"draws":', NEW.draws, ',"parents":', NEW.parents_json,
    ',"operator":', to_json(NEW.operator), ',"created_step":', NEW.created_step,
    ',"retired_step":', coalesce(NEW.retired_step::text, 'null'), '}');
  RETURN NEW;
END
$$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE league_adapters ADD COLUMN board_json text")
    op.execute(FUNCTION)
    op.execute("CREATE TRIGGER league_adapters_board_json BEFORE INSERT OR UPDATE ON league_adapters "
               "FOR EACH ROW EXECUTE FUNCTION league_adapters_board_json()")
    op.execute("UPDATE league_adapters SET board_json = NULL")  # the trigger fills every existing row


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER league_adapters_board_json ON league_adapters")
    op.execute("DROP FUNCTION league_adapters_board_json()")
    op.execute("ALTER TABLE league_adapters DROP COLUMN board_json")
