"""Read queries of the REST API and the dashboard over the league's own tables: the leaderboard as one query,
a run's rating curves, its whole lineage, one adapter's record. Writes stay in db.py; nothing here writes."""

from __future__ import annotations

import json
import math
from collections import defaultdict

import sqlalchemy as sa

from populora.rpc import not_found
from services.league import tables as t
from services.league.db import LeagueDB

# The leaderboard on Postgres: ranks, conservative skill and the JSON rows are computed by the server in one
# statement, so the service only concatenates text. Ties are broken by adapter id in code point order (COLLATE
# "C"), as the Python path does, and `mu - k*sigma` is the same IEEE double arithmetic on both sides. Each row's JSON
# but for rank and conservative skill is kept in `board_json`, rebuilt by a trigger when the row is written
# (migration 0005: strings through to_json, floats in Postgres' shortest exact form, `parents_json` as stored), so a
# read sorts and concatenates: 0.4 ms for 500 rows against 1.3 ms serialising them in the query. Numbers read back
# equal to the Python path's.
_PG_LEADERBOARD = """
SELECT EXISTS (SELECT 1 FROM league_runs WHERE run_id = %(run)s),
       (SELECT '[' || coalesce(string_agg(concat('{"rank":', r.pos, ',"conservative_skill":', r.skill, ',',
                                                 r.board_json), ',' ORDER BY r.pos), '') || ']'
        FROM (SELECT a.board_json, a.mu - %(k)s * a.sigma AS skill,
                     row_number() OVER (ORDER BY a.mu - %(k)s * a.sigma DESC, a.adapter_id COLLATE "C") AS pos
              FROM league_adapters a
              WHERE a.run_id = %(run)s AND a.role = ANY(%(roles)s) AND a.status = ANY(%(statuses)s)) r)
"""
ALL_ROLES = ["teacher", "student", "both"]


def leaderboard_body(db: LeagueDB, run_id: str, role: str, include_retired: bool) -> bytes:
    """The serialised leaderboard (the REST `Leaderboard` model): best conservative skill first."""
    k = db.rules.params.k
    head = json.dumps({"run_id": run_id, "role": role, "k": k}, separators=(",", ":"))[:-1]
    if db.read_engine.dialect.driver == "psycopg":
        rows = _pg_leaderboard_rows(db, run_id, role, include_retired)
    else:
        rows = json.dumps(leaderboard_rows(db, run_id, role, include_retired), separators=(",", ":"))
    return f'{head},"rows":{rows}}}'.encode()


def _pg_leaderboard_rows(db: LeagueDB, run_id: str, role: str, include_retired: bool) -> str:
    roles = [role, "both"] if role in ("teacher", "student") else [role] if role else ALL_ROLES
    statuses = ["active", "retired"] if include_retired else ["active"]
    with db.read_engine.connect() as conn:
        with conn.connection.driver_connection.cursor() as cur:
            cur.execute(_PG_LEADERBOARD, {"run": run_id, "k": float(db.rules.params.k), "roles": roles,
                                          "statuses": statuses})
            found, rows = cur.fetchone()
    if not found:
        raise not_found(f"run '{run_id}' does not exist")
    return rows


def leaderboard_rows(db: LeagueDB, run_id: str, role: str = "", include_retired: bool = True) -> list[dict]:
    """Leaderboard rows through SQLAlchemy (SQLite, and the reference the Postgres statement is tested against)."""
    k = db.rules.params.k
    return [{"rank": i + 1, "adapter_id": a.adapter_id, "role": a.role, "lora_rank": a.rank, "status": a.status,
             "mu": a.mu,
             "sigma": a.sigma, "conservative_skill": a.mu - k * a.sigma, "matches": a.matches, "wins": a.wins,
             "losses": a.losses, "draws": a.draws, "parents": a.parents, "operator": a.operator,
             "created_step": a.created_step, "retired_step": a.retired_step}
            for i, a in enumerate(db.adapters(run_id, role, include_retired))]


def _params(text: str) -> dict:
    """An adapter's operator parameters (JSON written by the evolver); anything else reads as none."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _epsilon(params: dict) -> float | None:
    eps = params.get("epsilon")
    return float(eps) if isinstance(eps, int | float) and not isinstance(eps, bool) else None


def _require_run(conn: sa.Connection, run_id: str) -> None:
    if conn.execute(sa.select(t.runs.c.run_id).where(t.runs.c.run_id == run_id)).first() is None:
        raise not_found(f"run '{run_id}' does not exist")


# Rating curves on Postgres: each adapter's columns written by the server (as the leaderboard's rows are), in
# adapter id order; floats in Postgres' shortest exact form, so they read back equal to the Python path's.
_PG_CURVES = """
SELECT '[' || coalesce(string_agg(c, ',' ORDER BY id), '') || ']' FROM (
  SELECT a.adapter_id COLLATE "C" AS id, concat(
    '{"adapter_id":', to_json(a.adapter_id), ',"role":', to_json(a.role), ',"status":', to_json(a.status),
    ',"created_step":', a.created_step, ',"retired_step":', coalesce(a.retired_step::text, 'null'),
    ',"steps":[', string_agg(h.step::text, ',' ORDER BY h.step), '],"mu":[', string_agg(h.mu::text, ',' ORDER BY h.step),
    '],"sigma":[', string_agg(h.sigma::text, ',' ORDER BY h.step),
    '],"conservative_skill":[', string_agg((h.mu - %(k)s * h.sigma)::text, ',' ORDER BY h.step), ']}') AS c
  FROM league_adapters a LEFT JOIN league_rating_history h ON h.adapter_id = a.adapter_id
  WHERE a.run_id = %(run)s GROUP BY a.adapter_id, a.role, a.status, a.created_step, a.retired_step) curves
"""


def run_ratings(db: LeagueDB, run_id: str) -> bytes:
    """The REST `RatingCurves`: every adapter's rating after each step it played, as columns (steps, mu, sigma,
    conservative skill), by adapter id, and the run's evolution events (one per child: step, operator, parents)."""
    k = db.rules.params.k
    with db.read_engine.connect() as conn:
        _require_run(conn, run_id)
        events = _events(conn, run_id)
        if db.read_engine.dialect.driver == "psycopg":
            with conn.connection.driver_connection.cursor() as cur:
                cur.execute(_PG_CURVES, {"run": run_id, "k": float(k)})
                curves = cur.fetchone()[0]
        else:
            curves = json.dumps(_curves(conn, run_id, k), separators=(",", ":"))
    head = json.dumps({"run_id": run_id, "k": k}, separators=(",", ":"))[:-1]
    return f'{head},"adapters":{curves},"events":{json.dumps(events, separators=(",", ":"))}}}'.encode()


def _curves(conn: sa.Connection, run_id: str, k: float) -> list[dict]:
    """Rating curves through SQLAlchemy (SQLite, and the reference the Postgres statement is tested against)."""
    a, h = t.adapters.c, t.rating_history.c
    members = conn.execute(sa.select(a.adapter_id, a.role, a.status, a.created_step, a.retired_step)
                           .where(a.run_id == run_id)).all()
    curves: dict[str, dict] = {m.adapter_id: {"adapter_id": m.adapter_id, "role": m.role, "status": m.status,
                                              "created_step": m.created_step, "retired_step": m.retired_step,
                                              "steps": [], "mu": [], "sigma": [], "conservative_skill": []}
                               for m in sorted(members, key=lambda m: m.adapter_id)}
    history = conn.execute(sa.select(h.adapter_id, h.step, h.mu, h.sigma)
                           .select_from(t.rating_history.join(t.adapters, a.adapter_id == h.adapter_id))
                           .where(a.run_id == run_id).order_by(h.adapter_id, h.step))
    for adapter_id, step, mu, sigma in history:
        c = curves[adapter_id]
        c["steps"].append(step)
        c["mu"].append(mu)
        c["sigma"].append(sigma)
        c["conservative_skill"].append(mu - k * sigma)
    return list(curves.values())


def _events(conn: sa.Connection, run_id: str) -> list[dict]:
    """One evolution event per child of the run, by step: who was born of whom by which operator, and which
    members of its role were retired at that step."""
    a = t.adapters.c
    children = conn.execute(sa.select(a.adapter_id, a.role, a.created_step, a.operator, a.params_json, a.parents_json)
                            .where(a.run_id == run_id, a.operator != "").order_by(a.created_step, a.adapter_id)).all()
    retired = defaultdict(list)
    for r in conn.execute(sa.select(a.adapter_id, a.role, a.retired_step).where(
            a.run_id == run_id, a.status == "retired").order_by(a.adapter_id)):
        retired[(r.retired_step, r.role)].append(r.adapter_id)
    out = []
    for c in children:
        params = _params(c.params_json)
        out.append({"step": c.created_step, "child_id": c.adapter_id, "role": c.role, "operator": c.operator,
                    "parents": json.loads(c.parents_json or "[]"), "epsilon": _epsilon(params),
                    "retired_ids": retired.get((c.created_step, c.role), [])})
    return out


def evolution_events(db: LeagueDB, run_id: str) -> list[dict]:
    """The run's evolution events (see `run_ratings`)."""
    with db.read_engine.connect() as conn:
        return _events(conn, run_id)


def run_lineage(db: LeagueDB, run_id: str) -> dict:
    """The whole lineage of a run: every adapter it ever had (members and retired) as a node, every parent ->
    child link as an edge with its operator, step and the ε the operator applied (null where it uses none)."""
    k = db.rules.params.k
    a, lin = t.adapters.c, t.lineage.c
    with db.read_engine.connect() as conn:
        _require_run(conn, run_id)
        nodes = conn.execute(sa.select(a.adapter_id, a.role, a.rank, a.status, a.created_step, a.retired_step,
                                       a.operator, a.params_json, a.parents_json, a.mu, a.sigma, a.matches)
                             .where(a.run_id == run_id).order_by(a.created_step, a.role, a.adapter_id)).all()
        edges = conn.execute(sa.select(lin.parent_id, lin.child_id, lin.operator, lin.step)
                             .where(lin.run_id == run_id).order_by(lin.step, lin.child_id, lin.parent_id)).all()
    params = {n.adapter_id: _params(n.params_json) for n in nodes}
    change = children_change(db, run_id)
    return {
        "run_id": run_id, "k": k,
        "nodes": [{"adapter_id": n.adapter_id, "role": n.role, "lora_rank": n.rank, "status": n.status,
                   "created_step": n.created_step,
                   "retired_step": n.retired_step, "operator": n.operator, "parents": json.loads(n.parents_json or "[]"),
                   "params": params[n.adapter_id], "mu": n.mu, "sigma": n.sigma,
                   "conservative_skill": n.mu - k * n.sigma, "matches": n.matches,
                   "relative_change": change.get(n.adapter_id)} for n in nodes],
        "edges": [{"parent_id": e.parent_id, "child_id": e.child_id, "operator": e.operator, "step": e.step,
                   "epsilon": _epsilon(params.get(e.child_id, {})), "relative_change": change.get(e.child_id)}
                  for e in edges],
    }


def children_change(db: LeagueDB, run_id: str) -> dict[str, float]:
    """{child_id: relative change of its weight update from its first parent's}, |dW' - dW| / |dW| as the evolver
    measured it when it made the child, from the evolution events of the step summaries the coordinator recorded
    (a child of a retried evolution, whose change was not measured again, has none)."""
    out: dict[str, float] = {}
    for summary in db.step_summaries(run_id):
        events = summary.get("evolution")
        for e in events if isinstance(events, list) else []:
            if not isinstance(e, dict):
                continue
            child, value = e.get("child"), e.get("relative_change")
            if isinstance(child, str) and isinstance(value, int | float) and not isinstance(value, bool) \
                    and math.isfinite(value):
                out[child] = float(value)
    return out


def adapter_record(db: LeagueDB, adapter_id: str) -> dict:
    """One adapter as the leaderboard shows it, with its operator parameters, seed and run."""
    k = db.rules.params.k
    with db.read_engine.connect() as conn:
        row = conn.execute(sa.select(t.adapters).where(t.adapters.c.adapter_id == adapter_id)).first()
    if row is None:
        raise not_found(f"adapter '{adapter_id}' does not exist")
    return {"adapter_id": row.adapter_id, "run_id": row.run_id, "role": row.role, "status": row.status,
            "rank": row.rank, "created_step": row.created_step, "retired_step": row.retired_step, "mu": row.mu,
            "sigma": row.sigma, "conservative_skill": row.mu - k * row.sigma, "matches": row.matches,
            "wins": row.wins, "losses": row.losses, "draws": row.draws, "operator": row.operator,
            "params": _params(row.params_json), "seed": row.seed, "parents": json.loads(row.parents_json or "[]")}


def run_config_yaml(db: LeagueDB, run_id: str) -> str:
    """The configuration a run was created with (YAML text; empty when it was created without one)."""
    with db.read_engine.connect() as conn:
        row = conn.execute(sa.select(t.runs.c.config_yaml).where(t.runs.c.run_id == run_id)).first()
    return row[0] if row else ""


def league_counts(db: LeagueDB, run_id: str) -> dict[str, int | float]:
    """The run's last applied match (its `seq`), its adapter counts and its held-out scores (how many, the latest
    recording time), which change whenever its league state does (a report moves the first, a child adds an adapter,
    an evaluation records or replaces scores). Three index lookups."""
    m, a, e = t.matches.c, t.adapters.c, t.evals.c
    active = sa.func.sum(sa.case((a.status == "active", 1), else_=0))
    with db.read_engine.connect() as conn:
        last = conn.execute(sa.select(sa.func.max(m.id)).where(m.run_id == run_id)).scalar()
        count, n_active = conn.execute(sa.select(sa.func.count(), active).where(a.run_id == run_id)).one()
        evals, evals_at = conn.execute(sa.select(sa.func.count(), sa.func.max(e.recorded_at))
                                       .where(e.run_id == run_id)).one()
    return {"adapters": int(count or 0), "active": int(n_active or 0), "last_match_seq": int(last or 0),
            "evals": int(evals or 0), "evals_recorded_at": float(evals_at or 0.0)}


# One adapter's ancestors and descendants in one statement: a recursive walk each way, each edge at the depth of its
# first appearance, which is the order of LeagueDB.lineage's level-by-level walk (then step, parent, child).
_LINEAGE = sa.text("""
WITH RECURSIVE
  up(parent_id, child_id, operator, step, depth) AS (
    SELECT parent_id, child_id, operator, step, 1 FROM league_lineage WHERE child_id = :id
    UNION
    SELECT l.parent_id, l.child_id, l.operator, l.step, u.depth + 1
    FROM league_lineage l JOIN up u ON l.child_id = u.parent_id WHERE u.depth < 100000),
  down(parent_id, child_id, operator, step, depth) AS (
    SELECT parent_id, child_id, operator, step, 1 FROM league_lineage WHERE parent_id = :id
    UNION
    SELECT l.parent_id, l.child_id, l.operator, l.step, d.depth + 1
    FROM league_lineage l JOIN down d ON l.parent_id = d.child_id WHERE d.depth < 100000)
SELECT 0 AS direction, parent_id, child_id, operator, step, min(depth) AS depth FROM up
GROUP BY parent_id, child_id, operator, step
UNION ALL
SELECT 1, parent_id, child_id, operator, step, min(depth) FROM down GROUP BY parent_id, child_id, operator, step
ORDER BY 1, 6, 5, 2, 3
""")


def adapter_lineage(db: LeagueDB, adapter_id: str) -> dict:
    """The REST `Lineage` of one adapter: its own origin, and its ancestor and descendant edges."""
    a = t.adapters.c
    with db.read_engine.connect() as conn:
        row = conn.execute(sa.select(a.run_id, a.role, a.rank, a.status, a.operator, a.parents_json,
                                     a.created_step).where(a.adapter_id == adapter_id)).first()
        if row is None:
            raise not_found(f"adapter '{adapter_id}' does not exist")
        edges = conn.execute(_LINEAGE, {"id": adapter_id}).all()
    walk: tuple[list[dict], list[dict]] = ([], [])
    for direction, parent_id, child_id, operator, step, _depth in edges:
        walk[direction].append({"parent_id": parent_id, "child_id": child_id, "operator": operator, "step": step})
    return {"adapter_id": adapter_id, "run_id": row.run_id, "role": row.role, "lora_rank": row.rank,
            "status": row.status, "operator": row.operator, "parents": json.loads(row.parents_json or "[]"),
            "created_step": row.created_step, "ancestors": walk[0], "descendants": walk[1]}
