"""The evaluation harness: every target's prompts in ONE multi-LoRA generation batch, every answer scored in the
sandbox, pass@1 and pass@k per target.

    results = evaluate(services, [EvalTarget("T0@v3", "run.T0", 3, path), EvalTarget("base", None, 0, None)],
                       "heldout", limit=30)
    results[0].to_json()  # {"run_id", "adapter_id", "version", "label", "benchmark", "n_problems", "samples",
                          #  "pass_at_1", "pass_at_k": {k: p}, "problems": [{"id", "passed", "n", "error"}]}

`services` is anything with `.inference` and `.sandbox` objects that answer the RPCs of proto/inference.proto and
proto/sandbox.proto (coordinator.services.Services: in-process services or gRPC clients). This package imports no
service and no coordinator code. Rows are sent problem by problem with every target of the problem side by side, so
when a batch must be split (the backend's max_batch rows, max_resident adapters) each part is still mixed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from populora.evals.benchmarks import (
    HELDOUT_SEED,
    Benchmark,
    BenchmarkError,
    Problem,
    get_benchmark,
    load_problems,
)
from populora.evals.prompts import COMPLETION_STOP, chat_messages
from populora.evals.scoring import DEFAULT_TIMEOUT_S, SCORERS, Answer, ks_for, pass_at_k
from populora.pb import common_pb2, inference_pb2, sandbox_pb2
from populora.seeds import derive_seed
from populora.tasks.triplet import Triplet

log = logging.getLogger(__name__)
DEFAULT_MAX_NEW_TOKENS = 256
Progress = Callable[[str, dict], None]
"""progress(event, info): "generated" {rows, tokens, seconds}, "scored" {jobs, seconds}, "done" {seconds}."""


class EvalError(ValueError):
    """An evaluation that cannot run: bad benchmark or data, an adapter that does not exist or does not fit the base
    model, bad sampling settings. Raised before anything is generated; the message names the input."""


@dataclass(frozen=True)
class EvalTarget:
    """One model to evaluate: an adapter version (`adapter_id`, `version`, its directory `path`), or the bare base
    model (`adapter_id` None)."""

    label: str
    adapter_id: str | None
    version: int = 0
    path: str | None = None


@dataclass(frozen=True)
class ProblemResult:
    id: str
    passed: int  # samples that passed
    n: int  # samples
    error: str = ""  # the first failing sample's error line ("" when every sample passed)
    answers: tuple[str, ...] = field(default=(), compare=False)  # the samples' texts (not in the JSON)

    def to_json(self) -> dict:
        return {"id": self.id, "passed": self.passed, "n": self.n, "error": self.error}


@dataclass(frozen=True)
class EvalResult:
    """One target's score on one benchmark."""

    run_id: str
    adapter_id: str | None
    version: int
    label: str
    benchmark: str
    n_problems: int
    samples: int
    pass_at_1: float
    pass_at_k: dict[int, float]
    problems: list[ProblemResult] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "adapter_id": self.adapter_id, "version": self.version, "label": self.label,
                "benchmark": self.benchmark, "n_problems": self.n_problems, "samples": self.samples,
                "pass_at_1": self.pass_at_1, "pass_at_k": {int(k): v for k, v in self.pass_at_k.items()},
                "problems": [p.to_json() for p in self.problems]}

    @classmethod
    def from_json(cls, d: dict) -> EvalResult:
        return cls(run_id=d.get("run_id", ""), adapter_id=d.get("adapter_id"), version=int(d.get("version", 0)),
                   label=d.get("label", ""), benchmark=d["benchmark"], n_problems=int(d["n_problems"]),
                   samples=int(d["samples"]), pass_at_1=float(d["pass_at_1"]),
                   pass_at_k={int(k): float(v) for k, v in d.get("pass_at_k", {}).items()},
                   problems=[ProblemResult(p["id"], int(p["passed"]), int(p["n"]), p.get("error", ""))
                             for p in d.get("problems", [])])


def score(run_id: str, target: EvalTarget, benchmark: str, per_problem: list[ProblemResult],
          samples: int) -> EvalResult:
    """pass@1 and pass@k over the problems (the mean of the per-problem unbiased estimates)."""
    n = len(per_problem)
    at_k = {k: sum(pass_at_k(p.n, p.passed, k) for p in per_problem) / n if n else 0.0 for k in ks_for(samples)}
    return EvalResult(run_id, target.adapter_id, target.version, target.label, benchmark, n, samples, at_k[1], at_k,
                      per_problem)


# ------------------------------------------------------------------------------------------------ checks
def _check_settings(samples: int, temperature: float, max_new_tokens: int) -> None:
    if samples < 1:
        raise EvalError(f"--samples must be at least 1 (got {samples})")
    if temperature < 0:
        raise EvalError(f"--temperature must be >= 0 (got {temperature})")
    if samples > 1 and temperature == 0:
        raise EvalError(f"--samples {samples} with --temperature 0 would draw the same greedy answer {samples} "
                        "times: give --temperature > 0 for pass@k")
    if max_new_tokens < 1:
        raise EvalError(f"max_new_tokens must be at least 1 (got {max_new_tokens})")


def adapter_base_model(path: str | Path) -> str:
    """The base model an adapter version was trained on, as its directory records it ("" when it does not say)."""
    root = Path(path)
    for name, key in (("meta.json", "base_model"), ("adapter_config.json", "base_model_name_or_path")):
        try:
            value = json.loads((root / name).read_text()).get(key) or ""
        except (OSError, ValueError, AttributeError):
            continue
        if value:
            return str(value)
    return ""


def _same_model(a: str, b: str) -> bool:
    if a == b:
        return True
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    return pa.exists() and pb.exists() and pa.resolve() == pb.resolve()


def check_targets(services: Any, targets: list[EvalTarget]) -> None:
    """Every adapter exists where the inference service loads from and was trained on its base model; raises
    EvalError naming the first that does not."""
    if not targets:
        raise EvalError("nothing to evaluate: name adapters (--run or --adapters) or --base")
    labels = [t.label for t in targets]
    if len(set(labels)) != len(labels):
        raise EvalError(f"target labels repeat: {labels}")
    info = services.inference.ListAdapters(inference_pb2.ListAdaptersRequest())
    for t in targets:
        if t.adapter_id is None:
            continue
        if t.path is not None:
            if not Path(t.path).is_dir():
                raise EvalError(f"adapter {t.label}: no adapter directory at {t.path}")
            trained_on = adapter_base_model(t.path)
            if trained_on and info.base_model and not _same_model(trained_on, info.base_model):
                raise EvalError(f"adapter {t.label} was trained on base model {trained_on!r}, but the inference "
                                f"service serves {info.base_model!r}: evaluate it with that model (--preset/--set "
                                "model.name=...)")
        try:
            services.inference.LoadAdapter(inference_pb2.LoadAdapterRequest(
                adapter=common_pb2.AdapterRef(adapter_id=t.adapter_id, version=t.version)))
        except Exception as e:  # ServiceError (in process or over gRPC): not found, or weights that do not fit
            raise EvalError(f"adapter {t.label} ({t.adapter_id} v{t.version}) cannot be served: "
                            f"{getattr(e, 'message', None) or e}") from None


# ------------------------------------------------------------------------------------------------ preparing tasks
def materialise(services: Any, problems: list[Problem]) -> list[Problem]:
    """`heldout` problems come as teacher proposals: the sandbox validates them as it validates training proposals,
    and its verdicts (outputs computed by the verifier) become the tasks, in one ValidateProposals call."""
    pending = [p for p in problems if p.kind == "task" and p.task is None]
    if not pending:
        return problems
    resp = services.sandbox.ValidateProposals(sandbox_pb2.ValidateProposalsRequest(proposals=[
        sandbox_pb2.Proposal(proposal_id=p.id, task_type=p.task_type, response_text=p.proposal,
                             given_program=p.given_program) for p in pending]))
    verdicts = {r.proposal_id: r for r in resp.results}
    out = []
    for p in problems:
        if p.kind == "task" and p.task is None:
            v = verdicts.get(p.id)
            if v is None or not v.valid:
                why = f"{v.reason}: {v.detail}" if v is not None else "no verdict"
                raise EvalError(f"problem {p.id}: the sandbox rejected its task ({why})")
            task = Triplet.from_pb(v.task)
            task.task_id = p.id
            p = replace(p, task=task)
        out.append(p)
    return out


# ------------------------------------------------------------------------------------------------ generation
def _request(problem: Problem, target: EvalTarget, request_id: str, chat: bool, samples: int, temperature: float,
             max_new_tokens: int, seed: int) -> inference_pb2.GenerationRequest:
    sampling = inference_pb2.SamplingParams(temperature=temperature, top_p=1.0, max_new_tokens=max_new_tokens,
                                            seed=derive_seed(seed, "eval", problem.id), n=samples)
    req = inference_pb2.GenerationRequest(request_id=request_id, sampling=sampling)
    if target.adapter_id is not None:
        req.adapter.CopyFrom(common_pb2.AdapterRef(adapter_id=target.adapter_id, version=target.version))
    if problem.kind == "program" and not chat:
        req.prompt = problem.prompt
        req.sampling.stop.extend(COMPLETION_STOP)
    else:
        req.messages.extend(inference_pb2.ChatMessage(role=m["role"], content=m["content"])
                            for m in chat_messages(problem))
    return req


def _batches(requests: list[inference_pb2.GenerationRequest], max_rows: int, max_adapters: int
             ) -> list[list[inference_pb2.GenerationRequest]]:
    """Consecutive runs of requests within the backend's limits (rows, distinct adapter versions)."""
    out: list[list[inference_pb2.GenerationRequest]] = []
    rows, adapters = 0, set()
    for r in requests:
        n = max(1, r.sampling.n)
        key = (r.adapter.adapter_id, r.adapter.version) if r.adapter.adapter_id else None
        grows = key is not None and key not in adapters
        if out and rows + n <= max_rows and len(adapters) + grows <= max_adapters:
            out[-1].append(r)
        else:
            out.append([r])
            rows, adapters = 0, set()
        rows += n
        if key is not None:
            adapters.add(key)
    return out


def generate(services: Any, requests: list[inference_pb2.GenerationRequest], max_rows: int | None = None
             ) -> tuple[dict[str, list[str]], int]:
    """Every request's completion texts, by request id, and the tokens generated: all in one Generate call unless
    the backend's limits split it."""
    info = services.inference.ListAdapters(inference_pb2.ListAdaptersRequest())
    limit_rows = min([x for x in (max_rows, info.max_batch) if x] or [10**9])
    if any(max(1, r.sampling.n) > limit_rows for r in requests):
        raise EvalError(f"--samples is over the inference batch limit of {limit_rows} rows")
    texts: dict[str, list[str]] = {}
    tokens = 0
    for batch in _batches(requests, limit_rows, info.max_resident or 10**9):
        for res in services.inference.Generate(inference_pb2.GenerateRequest(requests=batch)):
            texts[res.request_id] = [c.text for c in sorted(res.completions, key=lambda c: c.index)]
            tokens += sum(len(c.token_ids) for c in res.completions)
    missing = [r.request_id for r in requests if r.request_id not in texts]
    if missing:
        raise RuntimeError(f"inference returned no result for {len(missing)} request(s), e.g. {missing[:3]}")
    return texts, tokens


# ------------------------------------------------------------------------------------------------ the harness
def evaluate(services: Any, targets: list[EvalTarget], benchmark: str | Benchmark, *, limit: int | None = None,
             samples: int = 1, temperature: float = 0.0, seed: int = 0, progress: Progress | None = None,
             data: str | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, chat: bool = True,
             code_f_inputs: int = 10, timeout_s: float = DEFAULT_TIMEOUT_S, max_rows: int | None = None,
             run_id: str = "", problems: list[Problem] | None = None) -> list[EvalResult]:
    """Score every target on `benchmark` (a name of populora.evals.benchmarks.BENCHMARKS): the first `limit`
    problems, `samples` answers per problem at `temperature` (greedy at 0), one result per target, in order.

    All targets' prompts go to inference as one multi-LoRA batch; the answers are scored in the sandbox (one call per
    kind). `chat` is the model kind (its chat template, or raw completion: populora.evals.prompts). Sampling is
    seeded per problem from `seed`, the same for every target. `heldout` uses its own fixed seed for the problems
    (`HELDOUT_SEED`), so every arm sees the same ones. `problems` skips loading (already loaded and checked).
    """
    start = time.perf_counter()
    name = benchmark.name if isinstance(benchmark, Benchmark) else benchmark
    _check_settings(samples, temperature, max_new_tokens)
    try:
        kind = get_benchmark(name).kind
        if problems is None:
            problems = load_problems(name, data, limit, HELDOUT_SEED, code_f_inputs)
    except BenchmarkError as e:
        raise EvalError(str(e)) from None
    check_targets(services, targets)
    problems = materialise(services, problems)
    report = progress or (lambda event, info: None)

    # one multi-LoRA batch: problem-major, every target of a problem side by side
    requests, where = [], {}
    for p_idx, problem in enumerate(problems):
        for t_idx, target in enumerate(targets):
            rid = f"{t_idx}/{p_idx}"
            where[rid] = (t_idx, p_idx)
            requests.append(_request(problem, target, rid, chat, samples, temperature, max_new_tokens, seed))
    t0 = time.perf_counter()
    texts, tokens = generate(services, requests, max_rows)
    report("generated", {"rows": len(requests) * samples, "tokens": tokens, "seconds": time.perf_counter() - t0})

    answers = [Answer(f"{rid}/{k}", problems[where[rid][1]], text)
               for rid in (r.request_id for r in requests) for k, text in enumerate(texts[rid])]
    t0 = time.perf_counter()
    outcomes, jobs = SCORERS[kind](services.sandbox, answers, chat, timeout_s)
    report("scored", {"jobs": jobs, "answers": len(answers), "seconds": time.perf_counter() - t0})

    per: dict[tuple[int, int], list] = {}
    for a, o in zip(answers, outcomes):
        t_idx, p_idx = where[a.key.rsplit("/", 1)[0]]
        per.setdefault((t_idx, p_idx), []).append((o, a.text))
    results = []
    for t_idx, target in enumerate(targets):
        rows = []
        for p_idx, problem in enumerate(problems):
            outs = per[(t_idx, p_idx)]
            failed = next((o.error for o, _ in outs if not o.passed), "")
            rows.append(ProblemResult(problem.id, sum(o.passed for o, _ in outs), len(outs), failed,
                                      tuple(text for _, text in outs)))
        results.append(score(run_id, target, name, rows, samples))
    report("done", {"seconds": time.perf_counter() - start})
    log.info("eval %s: %d targets x %d problems x %d samples in %.1fs", name, len(targets), len(problems), samples,
             time.perf_counter() - start)
    return results
