"""The evaluation harness: every target's prompts in ONE multi-LoRA generation batch, every answer scored in the
sandbox, pass@1 and pass@k per target.

    results = evaluate(services, [EvalTarget("T0@v3", "run.T0", 3, path), EvalTarget("base", None, 0, None)],
                       "heldout", limit=30)
    results[0].to_json()  # {"run_id", "adapter_id", "version", "label", "benchmark", "protocol", "n_problems",
                          #  "samples", "pass_at_1", "pass_at_k": {k: p}, "splits": {"base": p, "plus": p},
                          #  "set_apart": [{"id", "reason"}], "problems": [{"id", "passed", "n", "error"}]}

`services` is anything with `.inference` and `.sandbox` objects that answer the RPCs of proto/inference.proto and
proto/sandbox.proto (coordinator.clients.services.Services: in-process services or gRPC clients). This package
imports no service and no coordinator code. Rows are sent problem by problem with every target of the problem side by side, so
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

from populora.evals.benchmarks import get_benchmark, load_problems
from populora.evals.evalplus import with_expected
from populora.evals.problem import HELDOUT_SEED, Benchmark, BenchmarkError, Problem
from populora.evals.progress import Pace, Progress
from populora.evals.prompts import PROTOCOLS, prompt_form, prompt_of
from populora.evals.scoring import DEFAULT_TIMEOUT_S, SCORERS, Answer, ks_for, pass_at_k
from populora.pb import common_pb2, inference_pb2, sandbox_pb2
from populora.seeds import derive_seed
from populora.tasks.triplet import Triplet

log = logging.getLogger(__name__)
DEFAULT_MAX_NEW_TOKENS = 256


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
    base_passed: int | None = None  # evalplus: samples that passed every base input (`passed`: base + plus)

    def to_json(self) -> dict:
        out = {"id": self.id, "passed": self.passed, "n": self.n, "error": self.error}
        if self.base_passed is not None:
            out["base_passed"] = self.base_passed
        return out


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
    protocol: str = "training"  # how the problems were put to the model (populora.evals.prompts)
    splits: dict[str, float] = field(default_factory=dict)  # evalplus: pass@1 on "base" and on "plus" (base+extra)
    set_apart: list[dict[str, str]] = field(default_factory=list)  # [{"id", "reason"}]: not in n_problems

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "adapter_id": self.adapter_id, "version": self.version, "label": self.label,
                "benchmark": self.benchmark, "protocol": self.protocol, "n_problems": self.n_problems,
                "samples": self.samples, "pass_at_1": self.pass_at_1,
                "pass_at_k": {int(k): v for k, v in self.pass_at_k.items()}, "splits": dict(self.splits),
                "set_apart": list(self.set_apart), "problems": [p.to_json() for p in self.problems]}

    @classmethod
    def from_json(cls, d: dict) -> EvalResult:
        return cls(run_id=d.get("run_id", ""), adapter_id=d.get("adapter_id"), version=int(d.get("version", 0)),
                   label=d.get("label", ""), benchmark=d["benchmark"], n_problems=int(d["n_problems"]),
                   samples=int(d["samples"]), pass_at_1=float(d["pass_at_1"]),
                   pass_at_k={int(k): float(v) for k, v in d.get("pass_at_k", {}).items()},
                   problems=[ProblemResult(p["id"], int(p["passed"]), int(p["n"]), p.get("error", ""),
                                           base_passed=p.get("base_passed")) for p in d.get("problems", [])],
                   protocol=d.get("protocol", "training"), splits=dict(d.get("splits", {})),
                   set_apart=list(d.get("set_apart", [])))


def score(run_id: str, target: EvalTarget, benchmark: str, per_problem: list[ProblemResult],
          samples: int, protocol: str = "training", set_apart: list[dict[str, str]] | None = None) -> EvalResult:
    """pass@1 and pass@k over the problems (the mean of the per-problem unbiased estimates); for EvalPlus problems
    also pass@1 on the base inputs alone and on base + plus (`pass_at_1`)."""
    n = len(per_problem)
    at_k = {k: sum(pass_at_k(p.n, p.passed, k) for p in per_problem) / n if n else 0.0 for k in ks_for(samples)}
    splits = {}
    if n and all(p.base_passed is not None for p in per_problem):
        splits = {"base": sum(pass_at_k(p.n, p.base_passed, 1) for p in per_problem) / n, "plus": at_k[1]}
    return EvalResult(run_id, target.adapter_id, target.version, target.label, benchmark, n, samples, at_k[1], at_k,
                      per_problem, protocol, splits, list(set_apart or []))


def target_protocol(target: EvalTarget, protocol: str | None) -> str:
    """The protocol a target is evaluated under: the one asked for, else the benchmark's own for the bare base model
    (it was never trained on the project's format) and the training format for an adapter."""
    if protocol is not None:
        if protocol not in PROTOCOLS:
            raise EvalError(f"--protocol {protocol!r}: give one of {', '.join(PROTOCOLS)}")
        return protocol
    return "benchmark" if target.adapter_id is None else "training"


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
def materialise(services: Any, problems: list[Problem], cache: Path | None = None,
                progress: Callable[[int, int], None] | None = None) -> list[Problem]:
    """Problems ready to score. `heldout` problems come as teacher proposals: the sandbox validates them as it
    validates training proposals, and its verdicts (outputs computed by the verifier) become the tasks, in one
    ValidateProposals call. EvalPlus problems get the canonical solution's outputs (populora.evals.evalplus,
    cached under `cache`; `progress(jobs done, jobs known)` as their jobs come back)."""
    problems = with_expected(services.sandbox, problems, cache, progress)
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
def _request(problem: Problem, target: EvalTarget, request_id: str, form: str, samples: int, temperature: float,
             max_new_tokens: int, seed: int) -> inference_pb2.GenerationRequest:
    sampling = inference_pb2.SamplingParams(temperature=temperature, top_p=1.0, max_new_tokens=max_new_tokens,
                                            seed=derive_seed(seed, "eval", problem.id), n=samples)
    req = inference_pb2.GenerationRequest(request_id=request_id, sampling=sampling)
    if target.adapter_id is not None:
        req.adapter.CopyFrom(common_pb2.AdapterRef(adapter_id=target.adapter_id, version=target.version))
    prompt, messages, stops = prompt_of(problem, form)
    if prompt:
        req.prompt = prompt
    else:
        req.messages.extend(inference_pb2.ChatMessage(role=m["role"], content=m["content"]) for m in messages)
    req.sampling.stop.extend(stops)
    return req


def check_context(problems: list[Problem], protocols: set[str], tokenizer: Any, context: int, max_new_tokens: int,
                  chat: bool) -> None:
    """Every problem's prompt, in each form the protocols put it in, fits the model's context with the generation
    budget; EvalError naming the first that does not by its file and line (a prompt is never truncated). A prompt of
    fewer bytes than the room is not tokenized (a token is at least one byte); a long one is measured on a prefix
    first, so a prompt of megabytes is refused without tokenizing all of it."""
    from populora.tasks.prompts import chat_token_ids

    room = context - max_new_tokens
    if room < 1:
        raise EvalError(f"the generation budget of {max_new_tokens} tokens leaves no room in the model's context of "
                        f"{context} tokens: lower --max-new-tokens")
    for problem in problems:
        if problem.kind == "task" and problem.task is None:  # heldout: generated here, short by construction
            continue
        for form in sorted({prompt_form(problem, p, chat) for p in protocols}):
            prompt, messages, _ = prompt_of(problem, form)
            text = prompt or "".join(m["content"] for m in messages)
            if len(text.encode()) + 64 * (len(messages) + 1) <= room:
                continue
            prefix = room * 8
            tokens = len(tokenizer.encode(text[:prefix], add_special_tokens=False))
            over = len(text) > prefix and tokens > room
            if not over:
                tokens = (len(tokenizer.encode(prompt, add_special_tokens=False)) if prompt
                          else len(chat_token_ids(tokenizer, messages, chat)))
            if tokens > room:
                where = problem.where or f"problem {problem.id}"
                raise EvalError(f"{where}: the prompt of problem {problem.id!r} is {'over ' if over else ''}{tokens} "
                                f"tokens; the model's context of {context} tokens less the generation budget of "
                                f"{max_new_tokens} leaves {room}: it cannot be asked without truncating it")


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


def generate(services: Any, requests: list[inference_pb2.GenerationRequest], max_rows: int | None = None,
             progress: Callable[[int, int], None] | None = None) -> tuple[dict[str, list[str]], int]:
    """Every request's completion texts, by request id, and the tokens generated: all in one Generate call unless
    the backend's limits split it. The results stream back as each request finishes, so `progress(answers done,
    answers)` follows the batch without cutting it into parts (parts would decode in narrower batches, where the
    batch gains most: docs/eval.md)."""
    info = services.inference.ListAdapters(inference_pb2.ListAdaptersRequest())
    limit_rows = min([x for x in (max_rows, info.max_batch) if x] or [10**9])
    if any(max(1, r.sampling.n) > limit_rows for r in requests):
        raise EvalError(f"--samples is over the inference batch limit of {limit_rows} rows")
    texts: dict[str, list[str]] = {}
    tokens, done, total = 0, 0, sum(max(1, r.sampling.n) for r in requests)
    if progress is not None:  # the prompt pass comes first, and no answer is done before it
        progress(0, total)
    for batch in _batches(requests, limit_rows, info.max_resident or 10**9):
        for res in services.inference.Generate(inference_pb2.GenerateRequest(requests=batch)):
            texts[res.request_id] = [c.text for c in sorted(res.completions, key=lambda c: c.index)]
            tokens += sum(len(c.token_ids) for c in res.completions)
            done += len(res.completions)
            if progress is not None:
                progress(done, total)
    missing = [r.request_id for r in requests if r.request_id not in texts]
    if missing:
        raise RuntimeError(f"inference returned no result for {len(missing)} request(s), e.g. {missing[:3]}")
    return texts, tokens


# ------------------------------------------------------------------------------------------------ the harness
def evaluate(services: Any, targets: list[EvalTarget], benchmark: str | Benchmark, *, limit: int | None = None,
             samples: int = 1, temperature: float = 0.0, seed: int = 0, progress: Progress | None = None,
             data: str | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, chat: bool = True,
             code_f_inputs: int = 10, timeout_s: float = DEFAULT_TIMEOUT_S, max_rows: int | None = None,
             run_id: str = "", problems: list[Problem] | None = None, protocol: str | None = None,
             cache: Path | None = None) -> list[EvalResult]:
    """Score every target on `benchmark` (a name of populora.evals.benchmarks.BENCHMARKS): the first `limit`
    problems, `samples` answers per problem at `temperature` (greedy at 0), one result per target, in order.

    All targets' prompts go to inference as one multi-LoRA batch; the answers are scored in the sandbox (one call per
    kind). `chat` is the model kind (its chat template, or raw completion: populora.evals.prompts), `protocol`
    training | benchmark for every target (None: the benchmark's own for the bare base model, the training format
    for adapters). Sampling is seeded per problem from `seed`, the same for every target. `heldout` uses its own
    fixed seed for the problems (`HELDOUT_SEED`), so every arm sees the same ones. Problems no allowed answer can
    match are set apart: not asked, not in the denominator, listed in each result. `problems` skips loading
    (already loaded and checked); `cache` is where EvalPlus's expected outputs are kept (None: not kept).
    """
    start = time.perf_counter()
    name = benchmark.name if isinstance(benchmark, Benchmark) else benchmark
    _check_settings(samples, temperature, max_new_tokens)
    try:
        get_benchmark(name)
        if problems is None:
            problems = load_problems(name, data, limit, HELDOUT_SEED, code_f_inputs)
    except BenchmarkError as e:
        raise EvalError(str(e)) from None
    protocols = [target_protocol(t, protocol) for t in targets]
    check_targets(services, targets)
    set_apart = [{"id": p.id, "reason": p.set_apart} for p in problems if p.set_apart]
    report = progress or (lambda event, info: None)
    problems = materialise(services, [p for p in problems if not p.set_apart], cache, Pace(report, "expected"))

    # one multi-LoRA batch: problem-major, every target of a problem side by side
    requests, where = [], {}
    for p_idx, problem in enumerate(problems):
        for t_idx, target in enumerate(targets):
            rid = f"{t_idx}/{p_idx}"
            where[rid] = (t_idx, p_idx)
            form = prompt_form(problem, protocols[t_idx], chat)
            requests.append(_request(problem, target, rid, form, samples, temperature, max_new_tokens, seed))
    t0 = time.perf_counter()
    texts, tokens = generate(services, requests, max_rows, Pace(report, "generating")) if requests else ({}, 0)
    report("generated", {"rows": len(requests) * samples, "tokens": tokens, "seconds": time.perf_counter() - t0})

    answers = []
    for rid in (r.request_id for r in requests):
        t_idx, p_idx = where[rid]
        problem = problems[p_idx]
        form = prompt_form(problem, protocols[t_idx], chat)
        answers += [Answer(f"{rid}/{k}", problem, text, form) for k, text in enumerate(texts[rid])]
    t0 = time.perf_counter()
    outcomes: dict[str, Any] = {}
    jobs = 0
    for kind in sorted({a.problem.kind for a in answers}):
        group = [a for a in answers if a.problem.kind == kind]
        got, n_jobs = SCORERS[kind](services.sandbox, group, timeout_s, Pace(report, "scoring"))
        outcomes.update((a.key, o) for a, o in zip(group, got))
        jobs += n_jobs
    report("scored", {"jobs": jobs, "answers": len(answers), "seconds": time.perf_counter() - t0})

    per: dict[tuple[int, int], list] = {}
    for a in answers:
        t_idx, p_idx = where[a.key.rsplit("/", 1)[0]]
        per.setdefault((t_idx, p_idx), []).append((outcomes[a.key], a.text))
    results = []
    for t_idx, target in enumerate(targets):
        rows = []
        for p_idx, problem in enumerate(problems):
            outs = per[(t_idx, p_idx)]
            failed = next((o.error for o, _ in outs if not o.passed), "")
            base = sum(bool(o.base) for o, _ in outs) if problem.kind == "evalplus" else None
            rows.append(ProblemResult(problem.id, sum(o.passed for o, _ in outs), len(outs), failed,
                                      tuple(text for _, text in outs), base))
        results.append(score(run_id, target, name, rows, samples, protocols[t_idx], set_apart))
    report("done", {"seconds": time.perf_counter() - start})
    log.info("eval %s: %d targets x %d problems x %d samples in %.1fs", name, len(targets), len(problems), samples,
             time.perf_counter() - start)
    return results
