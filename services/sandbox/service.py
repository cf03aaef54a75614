"""SandboxService: the wiring of the executor, the task domain, the math checker and the external verifiers behind
the RPCs of proto/sandbox.proto (Execute, ValidateProposals, CheckAnswers)."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable

import grpc
from sqlalchemy.exc import SQLAlchemyError

from populora.config import Config, SandboxConfig, TasksConfig
from populora.metrics import BATCH_SIZE, SANDBOX_STATUS
from populora.pb import sandbox_pb2
from populora.retry import db_unavailable
from populora.rpc import CONTRACTS, ServiceError, exhausted, invalid
from populora.tasks.jobs import Job, JobResult
from populora.tasks.mathcheck import MathChecker
from populora.tasks.triplet import TASK_TYPES, Triplet
from populora.tasks.verify import Attempt, Check, Proposal, check_answers, validate_proposals
from populora.tls import tls_files
from services.sandbox.backends import make_executor
from services.sandbox.executor import Executor
from services.sandbox.external import ExternalVerifiers
from services.sandbox.registry import VerifierRegistry

MAX_BATCH = 20_000
MAX_TIMEOUT_S = 60.0
MAX_MEMORY_MB = 8192


class SandboxService:
    """Stateless apart from the verifier registry (a table in the shared database); scales out."""

    CONTRACT = CONTRACTS["sandbox"]

    def __init__(self, executor: Executor, tasks: TasksConfig, sandbox: SandboxConfig,
                 registry: VerifierRegistry | None = None, external: ExternalVerifiers | None = None,
                 token: str = ""):
        self.executor, self.tasks, self.sandbox = executor, tasks, sandbox
        self.registry = registry
        self.external = external or ExternalVerifiers(sandbox.verifier_timeout_s, sandbox.verifier_retries,
                                                      sandbox.breaker_failures, sandbox.breaker_reset_s)
        self.token = token
        self._math: MathChecker | None = None
        self._math_lock = threading.Lock()

    def math_checker(self) -> MathChecker:
        """The math checker of math_w (spec 18): worker processes of this service, started at the first math task,
        so a run of code types only starts none."""
        with self._math_lock:
            if self._math is None:
                self._math = MathChecker(workers=max(1, min(4, self.sandbox.workers or 2)))
            return self._math

    def _math_for(self, task_types: list[str]) -> MathChecker | None:
        return self.math_checker() if "math_w" in task_types else None

    @classmethod
    def from_config(cls, cfg: Config) -> SandboxService:
        registry = VerifierRegistry(cfg.sandbox.db_url or cfg.league_db_url)
        external = ExternalVerifiers(cfg.sandbox.verifier_timeout_s, cfg.sandbox.verifier_retries,
                                     cfg.sandbox.breaker_failures, cfg.sandbox.breaker_reset_s,
                                     tls_files(cfg.services.tls, "sandbox"))
        return cls(make_executor(cfg.sandbox), cfg.tasks, cfg.sandbox, registry, external, token=cfg.services.token)

    def close(self) -> None:
        self.executor.close()
        if self._math is not None:
            self._math.close()
        self.external.close()
        if self.registry is not None:
            self.registry.close()

    # the executor, counted per status
    def run_jobs(self, jobs: list[Job]) -> list[JobResult]:
        results = self.executor.run(jobs)
        for r in results:
            SANDBOX_STATUS.labels(r.status).inc()
        return results

    def _counting_runner(self) -> tuple[Callable[[list[Job]], list[JobResult]], list[float]]:
        """A runner for one request and its [job count, CPU seconds] (a response reports the jobs its request took
        and the CPU time they used)."""
        count = [0, 0.0]

        def run(jobs: list[Job]) -> list[JobResult]:
            count[0] += len(jobs)
            results = self.run_jobs(jobs)
            count[1] += sum(r.cpu_seconds for r in results)
            return results

        return run, count

    def Execute(self, request: sandbox_pb2.ExecuteRequest) -> sandbox_pb2.ExecuteResponse:
        _check_batch(len(request.jobs), "jobs")
        jobs = []
        for k, j in enumerate(request.jobs):
            if not 0 <= j.timeout_s <= MAX_TIMEOUT_S:
                raise invalid(f"jobs[{k}].timeout_s={j.timeout_s}: must be in [0, {MAX_TIMEOUT_S}] (0 = default)")
            if not 0 <= j.memory_mb <= MAX_MEMORY_MB:
                raise invalid(f"jobs[{k}].memory_mb={j.memory_mb}: must be in [0, {MAX_MEMORY_MB}] (0 = default)")
            jobs.append(Job(j.job_id or str(k), j.program, calls=[j.call] if j.call else [], timeout_s=j.timeout_s,
                            memory_mb=j.memory_mb))
        BATCH_SIZE.labels("sandbox", "Execute").observe(len(jobs))
        out = sandbox_pb2.ExecuteResponse()
        for r in self.run_jobs(jobs):
            out.results.append(sandbox_pb2.ExecResult(job_id=r.job_id, status=r.status,
                                                      value_repr=r.reprs[0] if r.reprs else "",
                                                      stdout=plain_text(r.stdout), error=plain_text(r.error),
                                                      seconds=r.seconds, cpu_seconds=r.cpu_seconds))
        return out

    def ValidateProposals(self, request: sandbox_pb2.ValidateProposalsRequest
                          ) -> sandbox_pb2.ValidateProposalsResponse:
        _check_batch(len(request.proposals), "proposals")
        BATCH_SIZE.labels("sandbox", "ValidateProposals").observe(len(request.proposals))
        proposals = [Proposal(p.proposal_id, p.task_type, p.response_text, p.given_program, p.teacher_id)
                     for p in request.proposals]
        run, jobs = self._counting_runner()
        out = sandbox_pb2.ValidateProposalsResponse()
        math = self._math_for([p.task_type for p in proposals])
        for v in validate_proposals(proposals, self.tasks, run, math):
            res = sandbox_pb2.ValidationResult(proposal_id=v.proposal_id, valid=v.valid, reason=v.reason,
                                               detail=plain_text(v.detail))
            if v.task is not None:
                res.task.CopyFrom(v.task.to_pb())
            out.results.append(res)
        out.jobs, out.cpu_seconds = int(jobs[0]), jobs[1]
        return out

    def route(self, task_type: str) -> str:
        """The verifier of a task type: an external verifier's name, or "sandbox"."""
        return self.sandbox.verifiers.get(task_type, "sandbox")

    def check(self, attempts: list[Attempt], runner: Callable[[list[Job]], list[JobResult]] | None = None
              ) -> list[Check]:
        """Check attempts: in the sandbox, or through the external verifier the config names for the task type
        (a verifier that is not registered or does not serve that type gives verifier_error)."""
        by_route: dict[str, list[int]] = defaultdict(list)
        for idx, a in enumerate(attempts):
            by_route[self.route(a.task.task_type)].append(idx)
        verdicts: dict[int, Check] = {}
        for name, idxs in by_route.items():
            batch = [attempts[i] for i in idxs]
            if name == "sandbox":
                got = check_answers(batch, self.tasks, runner or self.run_jobs,
                                    self._math_for([a.task.task_type for a in batch]))
            else:
                got = self._check_external(name, batch)
            verdicts.update(zip(idxs, got))
        return [verdicts[i] for i in range(len(attempts))]

    def _check_external(self, name: str, attempts: list[Attempt]) -> list[Check]:
        try:
            rec = self.registry.get(name) if self.registry is not None else None
        except SQLAlchemyError as e:
            if not db_unavailable(e):
                raise
            # checking is pure: the caller may send the same attempts again once the database is back
            raise ServiceError(grpc.StatusCode.UNAVAILABLE, f"the verifier registry's database does not answer "
                                                            f"({type(e).__name__}); try again") from None
        if rec is None:
            return [Check(a.attempt_id, "verifier_error", f"external verifier {name!r} is not registered "
                                                          "(POST /v1/verifiers)", name) for a in attempts]
        out: list[Check] = []
        by_type: dict[str, list[Attempt]] = defaultdict(list)
        for a in attempts:
            by_type[a.task.task_type].append(a)
        for task_type, group in by_type.items():
            if task_type not in rec.task_types:
                out += [Check(a.attempt_id, "verifier_error", f"verifier {name!r} does not serve {task_type}", name)
                        for a in group]
            else:
                out += self.external.check(name, rec.url, task_type, group)
        order = {a.attempt_id: k for k, a in enumerate(attempts)}
        return sorted(out, key=lambda c: order[c.attempt_id])

    def CheckAnswers(self, request: sandbox_pb2.CheckAnswersRequest) -> sandbox_pb2.CheckAnswersResponse:
        _check_batch(len(request.attempts), "attempts")
        BATCH_SIZE.labels("sandbox", "CheckAnswers").observe(len(request.attempts))
        attempts = []
        for k, a in enumerate(request.attempts):
            if a.task.task_type not in TASK_TYPES:
                raise invalid(f"attempts[{k}].task.task_type={a.task.task_type!r}: allowed {list(TASK_TYPES)}")
            try:
                task = Triplet.from_pb(a.task)
            except ValueError as e:
                raise invalid(f"attempts[{k}].task: {e}") from None
            if not task.outputs:
                raise invalid(f"attempts[{k}].task has no outputs; send the task ValidateProposals returned")
            attempts.append(Attempt(a.attempt_id, task, a.response_text))
        run, jobs = self._counting_runner()
        out = sandbox_pb2.CheckAnswersResponse()
        for c in self.check(attempts, run):
            out.results.append(sandbox_pb2.AttemptResult(attempt_id=c.attempt_id, outcome=c.outcome,
                                                         detail=plain_text(c.detail), verifier=c.verifier))
        out.jobs, out.cpu_seconds = int(jobs[0]), jobs[1]
        return out


def plain_text(text: str) -> str:
    """`text` as valid UTF-8: a lone surrogate (a job's exception message may hold one) becomes its escape, so
    no response, proto or JSON, fails to carry it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _check_batch(n: int, what: str) -> None:
    if n > MAX_BATCH:
        raise exhausted(f"{n} {what} in one request; at most {MAX_BATCH}: split the batch")
