"""Bulk row writes of the league database, one implementation per dialect behind the same three calls.

Postgres gets one short statement per call over `unnest` of array parameters (one round trip, and a statement text
psycopg parses once and caches); SQLite gets SQLAlchemy's executemany. Both run inside the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

_PG_ARRAY = {sa.String: "text[]", sa.Text: "text[]", sa.Float: "float8[]", sa.BigInteger: "bigint[]",
             sa.Integer: "int[]"}


def _pg_array_type(column: sa.Column) -> str:
    for kind, name in _PG_ARRAY.items():
        if isinstance(column.type, kind):
            return name
    raise TypeError(f"no Postgres array type for column {column.name} ({column.type})")


class BulkWriter:
    """insert_new / upsert / update of many rows; `rows` are dicts with the same keys."""

    def insert_new(self, conn: sa.Connection, table: sa.Table, rows: Sequence[dict], key: str) -> set:
        """Insert rows whose `key` is not in the table yet; returns the keys that were inserted."""
        raise NotImplementedError

    def upsert(self, conn: sa.Connection, table: sa.Table, rows: Sequence[dict], keys: Sequence[str]) -> None:
        """Insert rows, or overwrite every other column where the `keys` exist."""
        raise NotImplementedError

    def update(self, conn: sa.Connection, table: sa.Table, rows: Sequence[dict], key: str) -> None:
        """Set the other columns of the rows identified by `key`."""
        raise NotImplementedError

    def any_of(self, column: sa.Column, values: Sequence) -> sa.ColumnElement[bool]:
        """`column IN values` as a condition whose statement text does not grow with len(values)."""
        raise NotImplementedError

    def any_pair(self, a: sa.Column, b: sa.Column, pairs: Sequence[tuple]) -> sa.ColumnElement[bool]:
        """`(a, b) IN pairs`, likewise."""
        raise NotImplementedError


class SqliteBulk(BulkWriter):
    def insert_new(self, conn, table, rows, key):
        if not rows:
            return set()
        stmt = sqlite.insert(table).on_conflict_do_nothing(index_elements=[key]).returning(table.c[key])
        return set(conn.execute(stmt, list(rows)).scalars())

    def upsert(self, conn, table, rows, keys):
        if not rows:
            return
        stmt = sqlite.insert(table)
        stmt = stmt.on_conflict_do_update(index_elements=list(keys), set_={
            c: stmt.excluded[c] for c in rows[0] if c not in keys})
        conn.execute(stmt, list(rows))

    def update(self, conn, table, rows, key):
        if not rows:
            return
        cols = [c for c in rows[0] if c != key]
        stmt = table.update().where(table.c[key] == sa.bindparam(f"k_{key}")).values(
            {c: sa.bindparam(f"k_{c}") for c in cols})
        conn.execute(stmt, [{f"k_{c}": v for c, v in r.items()} for r in rows])


    def any_of(self, column, values):
        return column.in_(list(values))

    def any_pair(self, a, b, pairs):
        return sa.tuple_(a, b).in_(list(pairs))


class PostgresBulk(BulkWriter):
    def any_of(self, column, values):
        return column == sa.any_(sa.bindparam(None, list(values), type_=postgresql.ARRAY(column.type)))

    def any_pair(self, a, b, pairs):
        xs, ys = zip(*pairs) if pairs else ((), ())
        arrays = (sa.bindparam(None, list(xs), type_=postgresql.ARRAY(a.type)),
                  sa.bindparam(None, list(ys), type_=postgresql.ARRAY(b.type)))
        keys = sa.func.unnest(*arrays).table_valued("x", "y").render_derived()
        return sa.tuple_(a, b).in_(sa.select(keys.c.x, keys.c.y))

    @staticmethod
    def _unnest(table: sa.Table, cols: Sequence[str]) -> str:
        return "unnest(" + ", ".join(f"CAST(:{c} AS {_pg_array_type(table.c[c])})" for c in cols) + ")"

    @staticmethod
    def _columns(rows: Sequence[dict]) -> tuple[list[str], dict[str, list]]:
        cols = list(rows[0])
        return cols, {c: [r[c] for r in rows] for c in cols}

    def insert_new(self, conn, table, rows, key):
        if not rows:
            return set()
        cols, params = self._columns(rows)
        sql = (f"INSERT INTO {table.name} ({', '.join(cols)}) SELECT * FROM {self._unnest(table, cols)} "
               f"ON CONFLICT ({key}) DO NOTHING RETURNING {key}")
        return set(conn.execute(sa.text(sql), params).scalars())

    def upsert(self, conn, table, rows, keys):
        if not rows:
            return
        cols, params = self._columns(rows)
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols if c not in keys)
        sql = (f"INSERT INTO {table.name} ({', '.join(cols)}) SELECT * FROM {self._unnest(table, cols)} "
               f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sets}")
        conn.execute(sa.text(sql), params)

    def update(self, conn, table, rows, key):
        if not rows:
            return
        cols, params = self._columns(rows)
        sets = ", ".join(f"{c} = v.{c}" for c in cols if c != key)
        sql = (f"UPDATE {table.name} AS t SET {sets} FROM {self._unnest(table, cols)} AS v({', '.join(cols)}) "
               f"WHERE t.{key} = v.{key}")
        conn.execute(sa.text(sql), params)


BULK_WRITERS: dict[str, type[BulkWriter]] = {"postgresql": PostgresBulk, "sqlite": SqliteBulk}


def bulk_writer(dialect: str) -> BulkWriter:
    try:
        return BULK_WRITERS[dialect]()
    except KeyError:
        raise ValueError(f"the league database supports {sorted(BULK_WRITERS)}, not '{dialect}'") from None

