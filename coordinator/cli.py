"""The `populora` command line: the one place that wires configuration, services and the training loop together."""

from __future__ import annotations

import argparse
import json
import os
import sys

from populora.rpc import SERVICE_NAMES

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _config_args(p: argparse.ArgumentParser, default_preset: str | None = None) -> None:
    g = p.add_argument_group("configuration")
    g.add_argument("--preset", default=default_preset, help="a preset from configs/ (cpu-tiny, cpu-smol, ...)")
    g.add_argument("--config", dest="config_file", help="a YAML config file (instead of a preset)")
    g.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override one field; repeatable")


def load_cli_config(args: argparse.Namespace):
    from populora.config import load_config

    preset = args.preset if not args.config_file else None
    return load_config(preset=preset, path=args.config_file, overrides=args.overrides)


def cmd_config_show(args: argparse.Namespace) -> int:
    cfg = load_cli_config(args)
    sys.stdout.write(cfg.to_yaml())
    return 0


def cmd_config_docs(args: argparse.Namespace) -> int:
    from populora.config import Config, field_docs, load_config

    defaults = load_config(env=False) if not (args.preset or args.config_file) else load_cli_config(args)
    flat = json.loads(defaults.model_dump_json())
    for path, doc in field_docs(Config).items():
        node = flat
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        value = "" if isinstance(node, dict) else f" = {json.dumps(node)}"
        print(f"{path}{value}\n    {doc}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from populora.models import list_models

    models = list_models()
    if args.json:
        print(json.dumps([m.__dict__ for m in models], indent=2))
        return 0
    for m in models:
        mark = "ok " if m.available else "-- "
        print(f"{mark}{m.name:16s} {m.description}\n    {m.where}")
    print("\nAlso: any local Hugging Face model directory, by path (models are never downloaded).")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from coordinator.clients.services import serve
    from populora.logs import setup_logging

    setup_logging(json_lines=os.environ.get("POPULORA_LOG_JSON", "1") == "1")
    return int(serve(args.service, load_cli_config(args), port=args.port, bind=args.bind,
                     metrics_port=args.metrics_port, insecure=args.insecure) or 0)


def check_run_flag(value: str | None, flag: str) -> None:
    """A run id given on the command line, against the rule of every id (populora.names), before anything is loaded
    or created: names.InvalidName naming the flag."""
    from populora import names

    if value is not None:
        names.check_run_id(value, f"{flag} {value!r}")


def cmd_train(args: argparse.Namespace) -> int:
    from coordinator.train import main as train_main

    check_run_flag(args.run_id, "--run-id (run.run_id)")
    dashboard = None
    if args.dashboard:  # the league's read-only web dashboard beside the run, on the run's database
        from services.league.rest import dashboard_server

        dashboard = dashboard_server(load_cli_config(args), port=args.dashboard, existing=False).start()
        print(f"dashboard: {dashboard.url} (it stops with the run; `populora dashboard` serves it again)", flush=True)
    try:
        return int(train_main(args, load_cli_config(args)) or 0)
    finally:
        if dashboard is not None:
            dashboard.stop()


def cmd_experiment(args: argparse.Namespace) -> int:
    if args.shard:
        from coordinator.experiment.shards import main as shard_main

        return int(shard_main(args, load_cli_config(args)) or 0)
    from coordinator.experiment.runner import main as experiment_main

    return int(experiment_main(args, load_cli_config(args)) or 0)


def cmd_dashboard(args: argparse.Namespace) -> int:
    from services.league.rest import dashboard_server

    check_run_flag(args.run, "--run")
    server = dashboard_server(load_cli_config(args), host=args.host, port=args.port, insecure=args.insecure)
    route = f"#/overview/{args.run}" if args.run else ""
    print(f"dashboard: {server.url}{route} (Ctrl-C to stop)", flush=True)
    server.run()
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from coordinator.record.report import main as report_main

    return int(report_main(args) or 0)


def cmd_eval(args: argparse.Namespace) -> int:
    from coordinator.experiment.evaluate import main as eval_main

    check_run_flag(args.run, "--run")
    return int(eval_main(args, load_cli_config(args)) or 0)


def cmd_verifiers(args: argparse.Namespace) -> int:
    from services.sandbox.verifiers_cli import main as verifiers_main

    return int(verifiers_main(args, load_cli_config(args)) or 0)


def cmd_evolve(args: argparse.Namespace) -> int:
    from services.evolver.cli import main as evolve_main

    return int(evolve_main(args) or 0)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="populora", description="Population self-play RL with LoRA adapters.")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("config", help="show the resolved configuration")
    csub = c.add_subparsers(dest="config_command", required=True)
    show = csub.add_parser("show", help="print the resolved config as YAML")
    _config_args(show, default_preset=None)
    show.set_defaults(func=cmd_config_show)
    docs = csub.add_parser("docs", help="every field with its default and documentation")
    _config_args(docs)
    docs.set_defaults(func=cmd_config_docs)

    m = sub.add_parser("models", help="list the base models")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_models)

    s = sub.add_parser("serve", help="start one service (distributed mode)")
    s.add_argument("service", choices=SERVICE_NAMES)
    s.add_argument("--port", type=int, default=None, help="gRPC port (default: services.<name>.port)")
    s.add_argument("--metrics-port", type=int, default=None,
                   help="/metrics port (default: services.<name>.metrics_port; one per replica on one host)")
    s.add_argument("--bind", default=None,
                   help="listen address (default: services.<name>.bind, loopback unless the config says otherwise)")
    s.add_argument("--insecure", action="store_true",
                   help="serve plaintext gRPC on a non-loopback address (refused without it unless services.tls is "
                        "on; said in the log)")
    _config_args(s, default_preset=None)
    s.set_defaults(func=cmd_serve)

    t = sub.add_parser("train", help="train a population (or the baseline) end to end")
    _config_args(t, default_preset="cpu-smol")
    t.add_argument("--steps", type=int, default=None, help="training steps (default: run.steps)")
    t.add_argument("--run-id", default=None, help="run id (default: generated)")
    t.add_argument("--resume", action="store_true", help="continue the run given by --run-id (start it if it does not exist)")
    t.add_argument("--mode", choices=("population", "baseline", "embedded", "distributed"), action="append",
                   default=[], help="`baseline` for AZR single-adapter self-play; `distributed` for gRPC + Redis")
    t.add_argument("--budget", default=None, metavar="flops=F[,tokens=N,sandbox_jobs=M]",
                   help="stop at the first step boundary at or past this compute (spec 14), e.g. flops=2e15 "
                        "(the warm start not charged) or tokens=2e6")
    t.add_argument("--no-report", action="store_true", help="skip writing the HTML report at the end")
    t.add_argument("--workers", type=int, default=None,
                   help="distributed mode: phase-worker threads in this process (0 = only external "
                        "`python -m coordinator.run.worker` processes; default 1, or 2 with loop.max_staleness >= 1 "
                        "so a step's games and the previous update run at once)")
    t.add_argument("--dashboard", type=int, nargs="?", const=8080, default=None, metavar="PORT",
                   help="serve the web dashboard on 127.0.0.1:PORT (8080) while the run trains")
    t.set_defaults(func=cmd_train)

    x = sub.add_parser("experiment", help="the population against the baseline at equal compute, from the same "
                       "warm start, scored on held-out problems, in one report")
    _config_args(x, default_preset="cpu-smol")
    x.add_argument("--budget", default=None, metavar="flops=F[,tokens=N,sandbox_jobs=M]",
                   help="the compute budget of every arm (spec 14), e.g. flops=2e15: the arms are compared at "
                        "25/50/75/100%% of it (of the least compute an arm ended with, for a token or job budget); "
                        "required unless the config sets run.budget_flops")
    x.add_argument("--seeds", default=None, metavar="S1,S2",
                   help="run seeds; each gives one population and one baseline run (default: run.seed)")
    x.add_argument("--arms", default=None, metavar="A1,A2",
                   help="the arms of each seed, of population, mixed-rank (the population with members of ranks "
                        "r/4..2r, or lora.teacher_ranks/student_ranks; the population arm is then every member at "
                        "lora.rank) and baseline (default: population,baseline; docs/experiment.md)")
    x.add_argument("--steps", type=int, default=None, help="most steps per arm (default: run.steps); the budget "
                   "should end the arms first")
    x.add_argument("--id", dest="experiment_id", default=None,
                   help="experiment id (default: from the preset and a digest of config, seeds and budget, so "
                        "rerunning the same command continues the experiment)")
    x.add_argument("--benchmark", action="append", default=[], metavar="NAME",
                   help="a benchmark to score the arms on besides `heldout` and eval.benchmarks (CRUXEval-O and -I "
                        "by default), e.g. humaneval, mbpp-plus; repeatable")
    x.add_argument("--limit", type=int, default=None, help="score on the first N problems of each benchmark "
                   "(default: all; 380 for heldout, of which every 5th chooses the best member and 304 are scored)")
    x.add_argument("--samples", type=int, default=1, help="samples per problem (1: greedy pass@1)")
    x.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="seeds trained and scored at once, each in a process of its own (default 1: one after "
                        "another); on a CPU the small generation batches of a step leave cores idle that another "
                        "seed's work fills (docs/experiment.md)")
    x.add_argument("--shard", default=None, metavar="SEED[:ARM]",
                   help="run one shard of the experiment: one seed (both arms and their scoring) or one seed and one "
                        "arm, reproducibly, and export it to RESULTS/<id>/shards/ (no weights) to commit; the result "
                        "is computed again from every shard there (docs/experiment.md, \"Shards\")")
    x.add_argument("--results", default="docs/results", metavar="DIR",
                   help="with --shard: where the experiment's shards, problem sets and result go (default "
                        "docs/results)")
    x.set_defaults(func=cmd_experiment)

    d = sub.add_parser("dashboard", help="serve the web dashboard of the runs in a run database (read-only)")
    d.add_argument("--run", default=None, help="the run to open first (default: the latest)")
    d.add_argument("--port", type=int, default=8080)
    d.add_argument("--host", default="127.0.0.1", help="listen address (0.0.0.0 to share it: HTTPS with "
                   "services.tls, else --insecure)")
    d.add_argument("--insecure", action="store_true", help="serve plain HTTP on a non-loopback address (said in "
                   "the log)")
    _config_args(d, default_preset="cpu-smol")
    d.set_defaults(func=cmd_dashboard)

    r = sub.add_parser("report", help="write the HTML report of a run")
    r.add_argument("run", help="run directory, or the id of a run under --output-dir")
    r.add_argument("--output-dir", default="runs", help="where runs live (default: runs)")
    r.set_defaults(func=cmd_report)

    from coordinator.experiment.evalargs import add_parser as add_eval_parser

    add_eval_parser(sub)
    ev = sub.choices["eval"]
    _config_args(ev, default_preset="cpu-smol")
    ev.set_defaults(func=cmd_eval)

    e = sub.add_parser("evolve", help="make a child adapter by hand with one operator (M1-M4, X1-X4)")
    e.add_argument("--operator", required=True)
    e.add_argument("--parents", nargs="+", required=True, help="one or two adapter version directories")
    e.add_argument("--out", required=True, help="directory to write the child to")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="operator parameter")
    e.set_defaults(func=cmd_evolve)

    from populora.certs import add_parser as add_certs_parser
    from populora.tokenfiles import add_parser as add_token_parser
    from services.sandbox.verifiers_cli import add_parser as add_verifiers_parser

    add_verifiers_parser(sub, _config_args, cmd_verifiers)

    add_certs_parser(sub)
    add_token_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from populora.config import ConfigError
    from populora.errors import ModelError, StoreError
    from populora.names import InvalidName

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, InvalidName, ModelError, StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
