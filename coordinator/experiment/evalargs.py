"""The `populora eval` subcommand's arguments, apart from the evaluation itself (coordinator/experiment/evaluate.py),
so that building the command line imports no model, store or benchmark code: every service process starts through
it, and the league and the sandbox never load torch."""

from __future__ import annotations

# populora/evals/prompts.py: PROTOCOLS (tests/coordinator/test_cli_imports.py checks they are the same)
EVAL_PROTOCOLS = ("training", "benchmark")


def add_parser(sub) -> None:
    """The `eval` subcommand's arguments (coordinator.cli adds the configuration group)."""
    e = sub.add_parser("eval", help="score adapters (and the base model) on a held-out benchmark")
    what = e.add_argument_group("what to evaluate")
    what.add_argument("--run", default=None, help="every active adapter of this run, at its latest version; the "
                                                  "scores are recorded in the run's league")
    what.add_argument("--adapters", nargs="+", default=None, metavar="DIR",
                      help="adapter version directories (<store>/adapters/<id>/v<N>) or adapter directories")
    what.add_argument("--base", action="store_true", help="the bare base model too")
    e.add_argument("--benchmark", default=None, help="heldout, humaneval, humaneval-plus, mbpp-plus, cruxeval-o, "
                                                     "cruxeval-i, jsonl, gsm8k, svamp, math500 (default: eval.benchmark)")
    e.add_argument("--data", default=None, help="the benchmark's data file (JSONL) where it needs one")
    e.add_argument("--limit", type=int, default=None, help="the first N problems (default: all; heldout 60)")
    e.add_argument("--samples", type=int, default=None, help="answers per problem (pass@k when > 1)")
    e.add_argument("--temperature", type=float, default=None, help="sampling temperature (0 = greedy)")
    e.add_argument("--max-new-tokens", type=int, default=None, help="tokens per answer (default: eval.max_new_tokens)")
    e.add_argument("--seed", type=int, default=0, help="sampling seed")
    e.add_argument("--out", default=None, metavar="FILE.json", help="write the scores as JSON")
    e.add_argument("--protocol", choices=EVAL_PROTOCOLS, default=None,
                   help="training: the format adapters were trained on; benchmark: prompts and answer reading as the "
                        "benchmark's authors do (default: benchmark for --base, training for adapters)")
    e.add_argument("--check-references", action="store_true",
                   help="score the benchmark's own reference solutions (no model) and print each that fails")
