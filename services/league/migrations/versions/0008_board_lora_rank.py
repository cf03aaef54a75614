"""Leaderboard rows carry each adapter's LoRA rank (Postgres only).

Revision ID: 0008
Revises: 0007

Members of one run may hold different ranks (spec 9, "Mixed ranks"), so the leaderboard shows each row's `lora_rank`
(the adapter's `rank` column, which every adapter has had since 0001). The trigger of 0005 that serialises a row
where it is written now writes that field too, and every row is serialised again. SQLite serialises in Python
(services/league/reads.py) and has no such column.
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

FUNCTION = """
CREATE OR REPLACE FUNCTION league_adapters_board_json() RETURNS trigger AS $$
BEGIN
  NEW.board_json := concat(
    '"adapter_id":', to_json(NEW.adapter_id), ',"role":', to_json(NEW.role), ',"lora_rank":', NEW.rank,
    ',"status":', to_json(NEW.status),
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
    op.execute(FUNCTION)
    op.execute("UPDATE league_adapters SET board_json = NULL")  # the trigger serialises every row again


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(FUNCTION.replace("',\"lora_rank\":', NEW.rank,\n    ", ""))  # 0005's, without the rank
    op.execute("UPDATE league_adapters SET board_json = NULL")
