"""The verifier registry's table is made by whichever process gets there first: one that loses the race to CREATE it
gets on with the table the other made, and a CREATE that fails for another reason is not hidden."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from services.sandbox import registry


def _lose_the_race(create_all):
    """A create_all that finds the table missing, and by the time it creates it another process has."""

    def racing(engine, tables, checkfirst):
        create_all(engine, tables=tables, checkfirst=checkfirst)  # the other process's CREATE
        raise sa.exc.OperationalError("CREATE TABLE external_verifiers", {}, Exception("table already exists"))

    return racing


def test_a_process_that_loses_the_race_to_create_the_table_uses_it(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'league.sqlite'}"
    monkeypatch.setattr(registry.metadata, "create_all", _lose_the_race(registry.metadata.create_all))
    reg = registry.VerifierRegistry(url)
    reg.register("v1", "http://127.0.0.1:9/verify", ["code_o"])
    assert [r.name for r in registry.VerifierRegistry(url).list()] == ["v1"]  # a second process, the same table


def test_a_create_that_fails_for_another_reason_is_raised(tmp_path, monkeypatch):
    def failing(engine, tables, checkfirst):
        raise sa.exc.OperationalError("CREATE TABLE external_verifiers", {}, Exception("disk I/O error"))

    monkeypatch.setattr(registry.metadata, "create_all", failing)
    with pytest.raises(sa.exc.OperationalError, match="disk I/O"):
        registry.VerifierRegistry(f"sqlite:///{tmp_path / 'league.sqlite'}")
