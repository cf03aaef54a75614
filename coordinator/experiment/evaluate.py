"""`populora eval` and the in-training `eval` phase: which adapter versions to evaluate, the services to do it with,
and where the scores go (the league, a JSON file, the run directory). The harness itself is populora.evals."""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path

from coordinator.clients.services import Services, build, remote
from coordinator.run.phases.evaluate import expected_cache, record, scores_of
from populora.config import Config, config_from_yaml, parse_override
from populora.evals import EvalError, EvalResult, EvalTarget, evaluate, load_problems
from populora.evals.benchmarks import BenchmarkError
from populora.evals.harness import check_context, materialise, target_protocol
from populora.evals.progress import Pace, progress_text
from populora.evals.scoring import check_references
from populora.pb import league_pb2
from populora.rpc import ServiceError
from populora.store import ArtifactStore, StoreError

log = logging.getLogger(__name__)
EVALS_FILE = "evals.jsonl"  # in the run directory: every score `populora eval --run` recorded, for the report


# ------------------------------------------------------------------------------------------------ targets
def _version_step(path: Path) -> int:
    """The training step after which a stored version was current (its meta.json), 0 when it does not say."""
    try:
        return int(json.loads((path / "meta.json").read_text()).get("step") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def adapter_dir_target(text: str) -> tuple[Path, EvalTarget]:
    """An adapter from a directory: a version (`<store>/adapters/<id>/v<N>`) or an adapter (its latest version).
    Returns the store root it lives in and the target."""
    path = Path(text).expanduser().resolve()
    if not path.is_dir():
        raise EvalError(f"adapter directory {text} does not exist")
    if not (path / "adapter_config.json").is_file():
        versions = sorted(int(p.name[1:]) for p in path.iterdir()
                           if p.is_dir() and re.fullmatch(r"v\d+", p.name) and (p / "adapter_config.json").is_file())
        if not versions:
            raise EvalError(f"{text} is not an adapter: it holds neither adapter_config.json nor v<N>/ versions")
        path = path / f"v{versions[-1]}"
    if not re.fullmatch(r"v\d+", path.name) or path.parent.parent.name != "adapters":
        raise EvalError(f"{text}: an adapter version lives at <store>/adapters/<adapter id>/v<N>; this one does not")
    adapter_id, version = path.parent.name, int(path.name[1:])
    return path.parent.parent.parent, EvalTarget(f"{adapter_id}@v{version}", adapter_id, version, str(path))


def run_targets(league, store: ArtifactStore, run_id: str) -> list[EvalTarget]:
    """The active members of a run, each at its latest stored version."""
    try:
        ratings = league.GetRatings(league_pb2.GetRatingsRequest(run_id=run_id)).ratings
    except ServiceError as e:
        raise EvalError(f"run {run_id!r}: {e.message}") from None
    out = []
    for r in sorted(ratings, key=lambda r: r.adapter_id):
        try:
            ref = store.latest(r.adapter_id)
        except StoreError as e:
            raise EvalError(f"run {run_id!r}, adapter {r.adapter_id}: {e}") from None
        out.append(EvalTarget(f"{r.adapter_id}@v{ref.version}", r.adapter_id, ref.version,
                              str(store.path_of(ref))))
    if not out:
        raise EvalError(f"run {run_id!r} has no active adapters")
    return out


# ------------------------------------------------------------------------------------------------ results
def table(results: list[EvalResult]) -> str:
    """The scores as a plain-text table (EvalPlus: pass@1 on the base inputs and on base + plus), then the problems
    set apart, when there are any."""
    ks = sorted({k for r in results for k in r.pass_at_k if k > 1})
    splits = any(r.splits for r in results)
    head = (["target", "benchmark", "protocol", "problems", "samples", "pass@1"] + (["base", "plus"] if splits else [])
            + [f"pass@{k}" for k in ks])
    rows = [[r.label, r.benchmark, r.protocol, str(r.n_problems), str(r.samples), f"{r.pass_at_1:.3f}"]
            + ([f"{r.splits[s]:.3f}" if s in r.splits else "-" for s in ("base", "plus")] if splits else [])
            + [f"{r.pass_at_k[k]:.3f}" if k in r.pass_at_k else "-" for k in ks] for r in results]
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    text = "\n".join("  ".join(x.ljust(w) for x, w in zip(line, widths)) for line in [head, *rows])
    apart = results[0].set_apart if results else []
    if apart:
        text += (f"\n{len(apart)} problem(s) set apart, not asked and not in the denominator (no allowed answer can "
                 "be judged right):\n" + "\n".join(f"  {a['id']}: {a['reason']}" for a in apart))
    return text


def model_context(cfg: Config) -> tuple[object, int]:
    """The base model's tokenizer and context length (its config's max_position_embeddings), without its weights."""
    from transformers import AutoTokenizer

    from populora.models import CHATML_TEMPLATE, ModelError, resolve_model_dir

    try:
        path = resolve_model_dir(cfg.model.name, cfg.model.cache_dir)
        tokenizer = AutoTokenizer.from_pretrained(path)
        context = int(json.loads((path / "config.json").read_text()).get("max_position_embeddings") or 0)
    except (ModelError, OSError, ValueError) as e:
        raise EvalError(f"model {cfg.model.name!r}: {e}") from None
    if not getattr(tokenizer, "chat_template", None):  # as load_base_model sets it
        tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer, context or 10**9


# ------------------------------------------------------------------------------------------------ the command
def _run_config(cfg: Config, run_id: str, overrides: list[str]) -> Config:
    """The config run `run_id` stored in the journal (its model, store and database), with this command's --set
    applied again; the given config when the database holds no journal of that run."""
    from coordinator.run.journal import JournalDB

    url = cfg.resolve(cfg.league.db_url)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        raise EvalError(f"run {run_id!r}: no run database at {url[len('sqlite:///'):]}; point --set "
                        "run.output_dir=DIR at the directory `populora train` wrote to")
    db = JournalDB(url)
    try:
        stored = db.get_run(run_id)
    finally:
        db.close()
    if stored is None:
        return cfg
    tree = config_from_yaml(stored["config_yaml"], f"the stored config of run {run_id}").model_dump()
    for key, value in (parse_override(o) for o in overrides):
        node = tree
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    tree["services"]["token"] = cfg.services.token
    return Config.model_validate(tree)


def open_eval_services(cfg: Config, league: bool) -> Services:
    """Inference and sandbox (and the league when scores are recorded): in process, or over gRPC when the config
    says distributed. The trainer and evolver are not needed."""
    make = build if cfg.run.deployment == "embedded" else remote
    return Services(inference=make("inference", cfg), sandbox=make("sandbox", cfg),
                    league=make("league", cfg) if league else None, trainer=None, evolver=None)


def main(args: argparse.Namespace, cfg: Config) -> int:
    """`populora eval`: everything is checked before the model is loaded; on any error nothing is written."""
    benchmark = args.benchmark or cfg.eval.benchmark
    limit = args.limit if args.limit is not None else None
    samples = args.samples if args.samples is not None else cfg.eval.samples
    temperature = args.temperature if args.temperature is not None else cfg.eval.temperature
    max_new_tokens = args.max_new_tokens or cfg.eval.max_new_tokens
    try:
        if args.check_references:
            if args.run or args.adapters or args.base:
                raise EvalError("--check-references scores the benchmark's own reference solutions: leave out "
                                "--run, --adapters and --base")
        elif bool(args.run) == bool(args.adapters) and not (args.base and not args.run and not args.adapters):
            raise EvalError("name what to evaluate: --run RUN or --adapters DIR... (and/or --base)")
        if args.run:
            cfg = _run_config(cfg, args.run, args.overrides)
        if args.adapters:
            roots_targets = [adapter_dir_target(d) for d in args.adapters]
            roots = {root for root, _ in roots_targets}
            if len(roots) > 1:
                raise EvalError(f"--adapters come from {len(roots)} stores ({', '.join(map(str, sorted(roots)))}); "
                                "give adapters of one store per command")
            root = roots.pop()
            if cfg.run.deployment == "embedded":
                cfg.store.root = str(root)
            elif root != cfg.store_root.resolve():
                raise EvalError(f"--adapters are in {root}, but the inference service reads {cfg.store_root}")
        if args.out and Path(args.out).parent and not Path(args.out).parent.exists():
            raise EvalError(f"--out {args.out}: directory {Path(args.out).parent} does not exist")
        data = args.data or cfg.eval.data or None
        problems = load_problems(benchmark, data, limit, code_f_inputs=cfg.tasks.code_f_inputs)
        if samples > 1 and temperature == 0:
            raise EvalError(f"--samples {samples} with --temperature 0 would draw the same greedy answer {samples} "
                            "times: give --temperature > 0 for pass@k")
        if not args.check_references:
            targets = [t for _, t in roots_targets] if args.adapters else []
            if args.base:
                targets.insert(0, EvalTarget("base", None, 0, None))
            protocols = {target_protocol(t, args.protocol) for t in targets}
            if args.run:  # the run's members are adapters: the training format unless --protocol says otherwise
                protocols.add(target_protocol(EvalTarget("run", "run"), args.protocol))
            tokenizer, context = model_context(cfg)
            check_context(problems, protocols, tokenizer, context, max_new_tokens, cfg.model.chat_template)
        store = ArtifactStore(cfg.store_root) if args.run else None
    except (EvalError, BenchmarkError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check_references:
        return _check_references(args, cfg, benchmark, problems)

    services = open_eval_services(cfg, league=bool(args.run))
    try:
        if args.run:
            targets = run_targets(services.league, store, args.run) + [t for t in targets if t.adapter_id is None]
            targets.sort(key=lambda t: t.adapter_id is not None)
        results = evaluate(services, targets, benchmark, limit=limit, samples=samples, temperature=temperature,
                           seed=args.seed, data=data, max_new_tokens=max_new_tokens,
                           chat=cfg.model.chat_template, code_f_inputs=cfg.tasks.code_f_inputs,
                           timeout_s=cfg.eval.timeout_s, run_id=args.run or "", problems=problems,
                           protocol=args.protocol, cache=expected_cache(cfg), progress=_printer(args))
        if args.run:
            steps = {t.adapter_id or "": _version_step(Path(t.path)) if t.path else 0 for t in targets}
            record(services.league, args.run, benchmark, scores_of(results), steps)
            run_dir = Path(cfg.run.output_dir) / args.run
            if run_dir.is_dir():
                with open(run_dir / EVALS_FILE, "a") as fh:
                    for r in results:
                        fh.write(json.dumps({**r.to_json(), "step": steps.get(r.adapter_id or "", 0)}) + "\n")
    except EvalError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        services.close()
    print(table(results))
    if args.out:
        body = {"benchmark": benchmark, "limit": limit if limit is not None else len(problems), "samples": samples,
                "results": [r.to_json() for r in results]}
        Path(args.out).write_text(json.dumps(body, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


def _check_references(args: argparse.Namespace, cfg: Config, benchmark: str, problems: list) -> int:
    """`--check-references`: the benchmark's own reference answers scored in the sandbox as a model's would be;
    prints each that fails with its reason and a summary; exit 0 when every reference given passes, else 1."""
    sandbox = build("sandbox", cfg) if cfg.run.deployment == "embedded" else remote("sandbox", cfg)
    printer = _printer(args)
    try:
        ready = materialise(Services(inference=None, sandbox=sandbox, league=None, trainer=None, evolver=None),
                            problems, expected_cache(cfg), Pace(printer, "expected"))
        checks, jobs = check_references(sandbox, ready, cfg.eval.timeout_s, printer)
    except EvalError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        sandbox.close()
    counts = {s: sum(c.status == s for c in checks) for s in ("passed", "failed", "none", "set_apart")}
    for c in checks:
        if c.status == "failed":
            print(f"FAIL {c.id} ({c.where}): {c.reason}")
    for c in checks:
        if c.status in ("none", "set_apart"):
            print(f"{'NO REFERENCE' if c.status == 'none' else 'SET APART'} {c.id} ({c.where}): {c.reason}")
    scored = counts["passed"] + counts["failed"]
    share = 100.0 * counts["passed"] / scored if scored else 0.0
    print(f"references of {benchmark}: {counts['passed']}/{scored} pass ({share:.1f}%), {counts['failed']} fail; "
          f"{counts['none']} without a reference and {counts['set_apart']} set apart are not counted "
          f"({jobs} sandbox jobs)")
    if args.out:
        Path(args.out).write_text(json.dumps({"benchmark": benchmark, "references": [
            {"id": c.id, "status": c.status, "reason": c.reason, "where": c.where} for c in checks]}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0 if counts["failed"] == 0 else 1


def _printer(args: argparse.Namespace):
    def progress(event: str, info: dict) -> None:
        if line := progress_text(event, info):
            print(line, file=sys.stderr, flush=True)
        elif event == "generated":
            print(f"generated {info['rows']} answers ({info['tokens']} tokens) in {info['seconds']:.1f} s",
                  file=sys.stderr, flush=True)
        elif event == "scored":
            print(f"scored them with {info['jobs']} sandbox jobs in {info['seconds']:.1f} s", file=sys.stderr,
                  flush=True)
    return progress
