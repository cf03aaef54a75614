"""Lineage's storage, a part of LeagueDB: recording a child (its rating, the member it replaces, its edges) and
walking an adapter's ancestors and descendants."""

from __future__ import annotations

import json

import sqlalchemy as sa

from services.league import checks, engine
from services.league import tables as t
from services.league.engine import AdapterRow, ChildSpec, UnknownEntity


class LineageStore:
    """LeagueDB's children and lineage edges (its engines, rules and adapter reads are LeagueDB's)."""

    def record_child(self, run_id: str, child: ChildSpec) -> AdapterRow:
        """Register a child with rating (mean of its parents' mu, sigma0), retire the member it replaces and record
        lineage edges (spec 8), in one transaction. Recording the same child again returns it unchanged."""
        with self.engine.begin() as conn:
            self._require_run(conn, run_id)
            ids = [*child.parent_ids, child.child_id] + ([child.retire_id] if child.retire_id else [])
            known = self._adapters_by_id(conn, ids, lock=True)
            recorded = checks.check_child(run_id, child, known)
            if recorded is not None:
                return recorded
            if child.retire_id:
                conn.execute(t.adapters.update().where(t.adapters.c.adapter_id == child.retire_id)
                             .values(status="retired", retired_step=child.step))
            mu, sigma = engine.child_rating([known[p] for p in child.parent_ids], self.rules.params)
            conn.execute(t.adapters.insert().values(
                adapter_id=child.child_id, run_id=run_id, role=child.role, status="active", rank=child.rank,
                created_step=child.step, mu=mu, sigma=sigma, operator=child.operator,
                params_json=child.params_json or "{}", seed=child.seed,
                parents_json=json.dumps(list(child.parent_ids))))
            conn.execute(t.rating_history.insert().values(adapter_id=child.child_id, step=child.step, mu=mu,
                                                          sigma=sigma, matches=0))
            conn.execute(t.lineage.insert(), [dict(parent_id=p, child_id=child.child_id, run_id=run_id,
                                                   operator=child.operator, step=child.step)
                                              for p in dict.fromkeys(child.parent_ids)])
            row = self._adapters_by_id(conn, [child.child_id])[child.child_id]
        self._bump()
        return row

    def lineage(self, adapter_id: str) -> tuple[list[sa.Row], list[sa.Row]]:
        """(ancestor edges, descendant edges) of an adapter, walking the lineage graph level by level: rows of the
        lineage table (parent_id, child_id, run_id, operator, step)."""
        c = t.lineage.c
        with self.read_engine.connect() as conn:
            if conn.execute(sa.select(t.adapters.c.adapter_id).where(t.adapters.c.adapter_id == adapter_id)
                            ).first() is None:
                raise UnknownEntity(f"adapter '{adapter_id}' does not exist")
            ancestors = self._walk(conn, adapter_id, c.child_id, c.parent_id)
            descendants = self._walk(conn, adapter_id, c.parent_id, c.child_id)
        return ancestors, descendants

    @staticmethod
    def _walk(conn: sa.Connection, start: str, from_col, to_col) -> list[sa.Row]:
        edges: list[sa.Row] = []
        seen, frontier = {start}, [start]
        while frontier:
            rows = conn.execute(sa.select(t.lineage).where(from_col.in_(frontier))
                                .order_by(t.lineage.c.step, t.lineage.c.parent_id, t.lineage.c.child_id)).all()
            frontier = []
            for r in rows:
                edges.append(r)
                nxt = getattr(r, to_col.name)
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        return edges
