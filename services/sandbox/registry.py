"""The external-verifier registry: one table (`external_verifiers`) in the shared database, so every sandbox
replica sees the same verifiers. Created here if missing; separate from the league's Alembic-managed tables."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

import sqlalchemy as sa

from populora.datastores import check_db_url
from populora.tasks.triplet import TASK_TYPES

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
# http(s), a host, then printable characters only (no spaces, no NUL or other control characters), bounded
URL_PATTERN = r"^https?://[^\s/\x00-\x1f\x7f][^\s\x00-\x1f\x7f]{0,2039}$"
_NAME = re.compile(NAME_PATTERN)
_URL = re.compile(URL_PATTERN)
metadata = sa.MetaData()
external_verifiers = sa.Table(
    "external_verifiers", metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("task_types", sa.Text, nullable=False),  # JSON list
    sa.Column("created_at", sa.Float, nullable=False),
)


class RegistryError(ValueError):
    """A registration that cannot be accepted; `field` names the offending field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass
class VerifierRecord:
    name: str
    url: str
    task_types: list[str]
    created_at: float = 0.0

    def to_dict(self) -> dict:
        return {"name": self.name, "url": self.url, "task_types": list(self.task_types),
                "created_at": self.created_at}


def check_record(name: str, url: str, task_types: list[str]) -> None:
    if not _NAME.fullmatch(name or ""):
        raise RegistryError("name", "1-64 characters of letters, digits, '_', '.', '-', starting with a letter "
                                    "or digit")
    if not _URL.fullmatch(url or ""):
        raise RegistryError("url", f"{url[:100]!r} is not an http:// or https:// URL of printable characters "
                                   "(at most 2048)")
    if not task_types:
        raise RegistryError("task_types", "name at least one task type")
    unknown = sorted(set(task_types) - set(TASK_TYPES))
    if unknown:
        raise RegistryError("task_types", f"unknown task type(s) {unknown}; allowed: {list(TASK_TYPES)}")


def create_table(engine: sa.Engine) -> None:
    """Create `external_verifiers` where it is missing. Processes that start at the same time (sandbox replicas, an
    experiment's seeds) may each find it missing and each CREATE it; the one that loses that race gets the database's
    error although the table is there, which is what it wanted."""
    try:
        metadata.create_all(engine, tables=[external_verifiers], checkfirst=True)
    except sa.exc.DBAPIError:
        if not sa.inspect(engine).has_table(external_verifiers.name):
            raise


class VerifierRegistry:
    """CRUD over the `external_verifiers` table."""

    def __init__(self, db_url: str):
        check_db_url(db_url, "sandbox.db_url (or league.db_url)")
        self.engine = sa.create_engine(db_url, pool_pre_ping=True)
        create_table(self.engine)

    def register(self, name: str, url: str, task_types: list[str]) -> VerifierRecord:
        """Add or replace a verifier (registration is idempotent by name)."""
        check_record(name, url, task_types)
        rec = VerifierRecord(name, url, sorted(set(task_types)), time.time())
        row = {"name": rec.name, "url": rec.url, "task_types": json.dumps(rec.task_types),
               "created_at": rec.created_at}
        with self.engine.begin() as conn:
            conn.execute(external_verifiers.delete().where(external_verifiers.c.name == name))
            conn.execute(external_verifiers.insert().values(**row))
        return rec

    def get(self, name: str) -> VerifierRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(external_verifiers.select().where(external_verifiers.c.name == name)).first()
        return self._record(row) if row else None

    def list(self) -> list[VerifierRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(external_verifiers.select().order_by(external_verifiers.c.name)).all()
        return [self._record(r) for r in rows]

    def delete(self, name: str) -> bool:
        with self.engine.begin() as conn:
            return conn.execute(external_verifiers.delete().where(external_verifiers.c.name == name)).rowcount > 0

    def close(self) -> None:
        self.engine.dispose()

    @staticmethod
    def _record(row) -> VerifierRecord:
        return VerifierRecord(row.name, row.url, json.loads(row.task_types), float(row.created_at))
