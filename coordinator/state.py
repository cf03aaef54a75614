"""Durable step state: each phase's result persisted under (run, step, phase) in the shared database, so a killed
coordinator or worker resumes at the phase it lost and never applies a phase twice."""

from __future__ import annotations

import json
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

metadata = sa.MetaData()

runs = sa.Table(
    "coord_runs", metadata,
    sa.Column("run_id", sa.String(128), primary_key=True),
    sa.Column("mode", sa.String(32), nullable=False),
    sa.Column("config_yaml", sa.Text, nullable=False),
    sa.Column("status", sa.String(32), nullable=False),  # running | finished | failed
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)

phases = sa.Table(
    "coord_phases", metadata,
    sa.Column("run_id", sa.String(128), primary_key=True),
    sa.Column("step", sa.Integer, primary_key=True),
    sa.Column("phase", sa.String(32), primary_key=True),
    sa.Column("result", sa.Text, nullable=False),
    sa.Column("seconds", sa.Float, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("finished_at", sa.Float, nullable=False),
)


class StateStore:
    """Phase results as JSON rows; `put` is insert-once (a second writer of the same key keeps the first result)."""

    def __init__(self, url: str):
        kwargs: dict[str, Any] = {"future": True}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        self.engine = sa.create_engine(url, pool_pre_ping=True, **kwargs)
        metadata.create_all(self.engine)

    def create_run(self, run_id: str, mode: str, config_yaml: str) -> bool:
        now = time.time()
        try:
            with self.engine.begin() as c:
                c.execute(runs.insert().values(run_id=run_id, mode=mode, config_yaml=config_yaml, status="running",
                                               created_at=now, updated_at=now))
            return True
        except IntegrityError:
            return False

    def get_run(self, run_id: str) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(sa.select(runs).where(runs.c.run_id == run_id)).mappings().first()
        return dict(row) if row else None

    def set_status(self, run_id: str, status: str) -> None:
        with self.engine.begin() as c:
            c.execute(runs.update().where(runs.c.run_id == run_id).values(status=status, updated_at=time.time()))

    def get(self, run_id: str, step: int, phase: str) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(sa.select(phases.c.result).where(
                (phases.c.run_id == run_id) & (phases.c.step == step) & (phases.c.phase == phase))).first()
        return json.loads(row[0]) if row else None

    def put(self, run_id: str, step: int, phase: str, result: dict, seconds: float, attempts: int = 1) -> bool:
        """Persist a phase result; False (and nothing changes) if one is already there."""
        try:
            with self.engine.begin() as c:
                c.execute(phases.insert().values(run_id=run_id, step=step, phase=phase,
                                                 result=json.dumps(result, sort_keys=True), seconds=seconds,
                                                 attempts=attempts, finished_at=time.time()))
            return True
        except IntegrityError:
            return False

    def done_phases(self, run_id: str) -> list[tuple[int, str]]:
        with self.engine.connect() as c:
            rows = c.execute(sa.select(phases.c.step, phases.c.phase).where(phases.c.run_id == run_id)
                             .order_by(phases.c.step, phases.c.finished_at)).all()
        return [(int(s), str(p)) for s, p in rows]

    def phase_rows(self, run_id: str) -> list[dict]:
        with self.engine.connect() as c:
            rows = c.execute(sa.select(phases).where(phases.c.run_id == run_id)
                             .order_by(phases.c.step, phases.c.finished_at)).mappings().all()
        return [dict(r) for r in rows]

    def close(self) -> None:
        self.engine.dispose()
