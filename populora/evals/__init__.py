"""Held-out evaluation: benchmarks as loaders, prompts and program extraction per model kind, scorers
that run everything in the sandbox, pass@k, and the harness that puts every adapter in one multi-LoRA batch."""

from populora.evals.benchmarks import BENCHMARKS, get_benchmark, load_problems
from populora.evals.harness import EvalError, EvalResult, EvalTarget, ProblemResult, evaluate
from populora.evals.problem import Benchmark, BenchmarkError, Problem
from populora.evals.scoring import pass_at_k

__all__ = ["BENCHMARKS", "Benchmark", "BenchmarkError", "Problem", "get_benchmark", "load_problems", "EvalError",
           "EvalResult", "EvalTarget", "ProblemResult", "evaluate", "pass_at_k"]
