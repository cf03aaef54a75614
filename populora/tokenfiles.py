"""`populora token`: an identity's token in a file for that client alone, and its verifier (populora.tokens) in the
verifiers file every server reads (`services.tokens_path`), which never holds a token.

    populora token new coordinator dashboard --dir secrets   # secrets/NAME.token, and its verifier in
                                                             # secrets/token-verifiers.yaml
    populora token new coordinator --dir secrets --keep-old  # a rotation: the old verifier stays beside the new
    populora token drop-old coordinator --dir secrets        # ... until every client holds the new token
    populora token hash < my-token                           # the verifier of a token made elsewhere
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from populora.scopes import IDENTITIES, check_tokens
from populora.tokens import TokenError, make_token, verifier

VERIFIERS_FILE = "token-verifiers.yaml"


def _write(path: Path, text: str, mode: int) -> None:
    """Replace `path` atomically (a reader sees the old file or the new one), readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(path)


def token_file(directory: str | Path, identity: str) -> Path:
    return Path(directory) / f"{identity}.token"


def read_verifiers(path: Path) -> dict[str, list[str]]:
    """identity -> its verifiers (oldest first) of a verifiers file; {} when there is none yet."""
    import yaml

    if not path.exists():
        return {}
    loaded = yaml.safe_load(path.read_text()) or {}
    if not isinstance(loaded, dict):
        raise TokenError(f"{path} must hold a mapping identity -> verifier")
    check_tokens(loaded)
    return {identity: [given] if isinstance(given, str) else list(given) for identity, given in loaded.items()}


def write_verifiers(path: Path, entries: dict[str, list[str]]) -> None:
    import yaml

    tree = {identity: given[0] if len(given) == 1 else given for identity, given in entries.items() if given}
    _write(path, "# identity -> the verifier of its token (`populora token`); never a token\n" +
           yaml.safe_dump(tree, sort_keys=True), 0o600)


def new_tokens(directory: str | Path, identities: list[str], keep_old: bool = False) -> list[Path]:
    """A new token for each identity, written to DIR/NAME.token (mode 0600), and its verifier put in
    DIR/token-verifiers.yaml: in place of the identity's verifiers, or beside them with `keep_old` (the overlap of a
    rotation). The verifiers file is written first, so a server that reads it takes the new token before any client
    has it. Returns the files written."""
    unknown = sorted(set(identities) - set(IDENTITIES))
    if unknown or not identities:
        raise TokenError(f"name one or more identities of {list(IDENTITIES)}" + (f", not {unknown}" if unknown else ""))
    folder = Path(directory)
    path = folder / VERIFIERS_FILE
    entries = read_verifiers(path)
    made = {identity: make_token() for identity in identities}
    for identity, token in made.items():
        entries[identity] = [*(entries.get(identity, []) if keep_old else []), verifier(token)]
    write_verifiers(path, entries)
    written = [path]
    for identity, token in made.items():
        _write(token_file(folder, identity), token + "\n", 0o600)
        written.append(token_file(folder, identity))
    return written


def drop_old(directory: str | Path, identities: list[str]) -> Path:
    """Keep only the newest verifier of each identity (the end of a rotation)."""
    path = Path(directory) / VERIFIERS_FILE
    entries = read_verifiers(path)
    missing = sorted(set(identities) - set(entries))
    if missing or not identities:
        raise TokenError(f"{path} holds no verifier of {missing or 'the identities named'}")
    for identity in identities:
        entries[identity] = entries[identity][-1:]
    write_verifiers(path, entries)
    return path


def add_parser(sub) -> None:
    """The `populora token` subcommand."""
    t = sub.add_parser("token", help="make scoped tokens and the verifiers servers keep in their place")
    tsub = t.add_subparsers(dest="token_command", required=True)
    new = tsub.add_parser("new", help="a new token per identity (DIR/NAME.token, for that client alone) and its "
                                      "verifier in DIR/token-verifiers.yaml (for the servers: services.tokens_path)")
    new.add_argument("identities", nargs="+", metavar="NAME", help=f"one of {', '.join(IDENTITIES)}")
    new.add_argument("--dir", default="secrets", help="where to write them (default: secrets)")
    new.add_argument("--keep-old", action="store_true",
                     help="keep the identity's current verifiers beside the new one (a rotation's overlap)")
    new.set_defaults(func=main)
    hashed = tsub.add_parser("hash", help="the verifier of the token on stdin (one you made yourself)")
    hashed.set_defaults(func=main)
    drop = tsub.add_parser("drop-old", help="keep only the newest verifier of each identity (a rotation's end)")
    drop.add_argument("identities", nargs="+", metavar="NAME")
    drop.add_argument("--dir", default="secrets")
    drop.set_defaults(func=main)


def main(args) -> int:
    try:
        if args.token_command == "hash":
            print(verifier(sys.stdin.readline().strip()))
            return 0
        if args.token_command == "new":
            written = new_tokens(args.dir, args.identities, args.keep_old)
            for path in written:
                print(path)
            print(f"servers: services.tokens_path={written[0]} (verifiers only); each client: "
                  "services.token_path=its own NAME.token")
            return 0
        print(drop_old(args.dir, args.identities))
        return 0
    except TokenError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
