"""Scoped tokens and their verifiers (populora.tokens, `populora token`: populora.tokenfiles): a server's files hold verifiers from which
no token can be read, each client's file its own token alone; a presented token matches only its own verifier; a
rotation keeps the old and the new verifier until the old is dropped."""

from __future__ import annotations

import io
import stat

import pytest
import yaml

from coordinator.cli import main as cli_main
from populora import tokenfiles, tokens
from populora.access import EVERY, Access, Refused
from populora.scopes import IDENTITIES


def test_a_verifier_holds_no_token_and_matches_only_its_own():
    token, other = tokens.make_token(), tokens.make_token()
    made = tokens.verifier(token)
    assert tokens.is_verifier(made) and token not in made and len(token) >= 43
    assert tokens.matches(token, tokens.parse(made)) and not tokens.matches(other, tokens.parse(made))
    assert tokens.verifier(token) != made  # a new salt each time: equal tokens do not give equal verifiers
    assert tokens.matches(token[:-1], tokens.parse(made)) is False
    with pytest.raises(tokens.TokenError, match="at least 24"):
        tokens.verifier("short-token")
    with pytest.raises(tokens.TokenError, match="no whitespace"):
        tokens.verifier("a token with spaces in it, long enough")
    with pytest.raises(tokens.TokenError, match="not a token verifier") as e:
        tokens.parse(token)
    assert token not in str(e.value)  # a token put where a verifier belongs is not repeated


def test_a_server_takes_the_tokens_its_verifiers_name_and_nothing_else():
    held = {identity: tokens.make_token() for identity in IDENTITIES}
    access = Access(tokens={identity: tokens.verifier(t) for identity, t in held.items()})
    for identity, token in held.items():
        assert access.identity(f"Bearer {token}", "", read_only=False) == identity
    for wrong in ("Bearer " + tokens.make_token(), "Bearer " + tokens.verifier(held["coordinator"]), "", "Basic x"):
        with pytest.raises(Refused):
            access.identity(wrong, "", read_only=True)
    assert not access.open_reads and access.identity("", "league", read_only=False) == "league"
    assert Access("dev-token-on-one-machine").identity("Bearer dev-token-on-one-machine", "", False) == EVERY


def test_populora_token_writes_the_clients_tokens_and_the_servers_verifiers(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "secrets"
    assert cli_main(["token", "new", "coordinator", "dashboard", "--dir", str(folder)]) == 0
    verifiers = folder / tokenfiles.VERIFIERS_FILE
    mine = {i: (folder / f"{i}.token").read_text().strip() for i in ("coordinator", "dashboard")}
    text = verifiers.read_text()
    assert not any(t in text for t in mine.values())
    for path in (verifiers, *(folder / f"{i}.token" for i in mine)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    access = Access(tokens_file=str(verifiers))
    assert [access.identity(f"Bearer {t}", "", False) for t in mine.values()] == ["coordinator", "dashboard"]
    # a rotation: the old verifier stays beside the new one until it is dropped
    old = mine["coordinator"]
    assert cli_main(["token", "new", "coordinator", "--dir", str(folder), "--keep-old"]) == 0
    new = (folder / "coordinator.token").read_text().strip()
    assert len(yaml.safe_load(verifiers.read_text())["coordinator"]) == 2
    assert access.identity(f"Bearer {old}", "", False) == access.identity(f"Bearer {new}", "", False) == "coordinator"
    assert cli_main(["token", "drop-old", "coordinator", "--dir", str(folder)]) == 0
    with pytest.raises(Refused):
        access.identity(f"Bearer {old}", "", False)
    assert access.identity(f"Bearer {mine['dashboard']}", "", False) == "dashboard"  # the others untouched
    # a token made elsewhere, hashed from stdin
    monkeypatch.setattr("sys.stdin", io.StringIO(new + "\n"))
    capsys.readouterr()
    assert cli_main(["token", "hash"]) == 0
    printed = capsys.readouterr().out.strip()
    assert tokens.matches(new, tokens.parse(printed)) and new not in printed
    assert cli_main(["token", "new", "mallory", "--dir", str(folder)]) == 2
    assert "mallory" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO("too-short\n"))
    assert cli_main(["token", "hash"]) == 2 and "at least" in capsys.readouterr().err


def test_a_server_holding_the_deployment_wide_token_says_it_is_for_one_machine(caplog):
    from populora.config import load_config

    with caplog.at_level("WARNING", logger="populora.access"):
        Access.from_config(load_config(env=False, overrides=["services.token=dev-token-0123456789abcdef"]).services,
                           tls=False, server="league")
    assert "league: services.token is set" in caplog.text and "development setup on one machine" in caplog.text
    assert "dev-token-0123456789abcdef" not in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="populora.access"):
        Access.from_config(load_config(env=False).services, tls=True, server="league")
        Access.from_config(load_config(env=False, overrides=["services.token=client-token-0123456789"]).services,
                           tls=False)  # a client presenting its own token: no server, no warning
    assert "services.token" not in caplog.text
