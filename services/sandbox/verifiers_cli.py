"""`populora verifiers`: the external-verifier registry kept by a role that may write it. In a deployment with a
database role per service (python -m coordinator.pgroles) the sandbox may only read the registry, so verifiers are
registered here, with the URL of the database's owner (the league's `league.db_url`, or `sandbox.db_url` where a
configuration sets one):

    populora verifiers add my-checker https://my-checker:9000/check --task-type code_o --config config.yaml
    populora verifiers list --config config.yaml
    populora verifiers remove my-checker --config config.yaml
"""

from __future__ import annotations

import json
import sys

from services.sandbox.registry import RegistryError, VerifierRegistry


def add_parser(sub, config_args, func) -> None:
    """The `populora verifiers` subcommands; `config_args` adds the configuration flags to a parser, `func` runs
    one (with the parsed arguments)."""
    v = sub.add_parser("verifiers", help="register, list or remove external verifiers (as the database's owner)")
    vsub = v.add_subparsers(dest="verifiers_command", required=True)
    add = vsub.add_parser("add", help="register (or replace) a verifier")
    add.add_argument("name")
    add.add_argument("url", help="https://HOST:PORT/PATH that receives the contract's POST")
    add.add_argument("--task-type", dest="task_types", action="append", required=True,
                     choices=("code_i", "code_o", "code_f"), help="a task type it checks; repeatable")
    listed = vsub.add_parser("list", help="the registered verifiers, as JSON")
    remove = vsub.add_parser("remove", help="remove a verifier")
    remove.add_argument("name")
    for p in (add, listed, remove):
        config_args(p)
        p.set_defaults(func=func)


def main(args, cfg) -> int:
    import sqlalchemy as sa

    registry = VerifierRegistry(cfg.resolve(cfg.sandbox.db_url or cfg.league.db_url))
    try:
        if args.verifiers_command == "add":
            print(json.dumps(registry.register(args.name, args.url, args.task_types).to_dict()))
        elif args.verifiers_command == "list":
            print(json.dumps([r.to_dict() for r in registry.list()], indent=2))
        elif not registry.delete(args.name):
            print(f"error: no verifier named {args.name!r}", file=sys.stderr)
            return 1
        return 0
    except RegistryError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except sa.exc.ProgrammingError as e:
        if getattr(e.orig, "sqlstate", "") != "42501":
            raise
        print("error: this database role may not write the verifier registry; run this with the URL of the "
              "database's owner (the league's league.db_url)", file=sys.stderr)
        return 2
    finally:
        registry.close()
