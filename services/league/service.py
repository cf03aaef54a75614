"""The league service: ratings, PFSP matchmaking, match reports, selection and lineage behind proto/league.proto."""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import time
from dataclasses import dataclass

import grpc
import numpy as np
import sqlalchemy as sa
from google.protobuf.message import Message

from populora.config import CODE_TASK_TYPES, ROLES, TASK_TYPES, Config
from populora.metrics import BATCH_SIZE
from populora.pb import league_pb2
from populora.records import EvalScore, ProblemScore, Usage
from populora.retry import db_unavailable
from populora.rpc import (
    CONTRACTS,
    ServiceError,
    check_names,
    conflict,
    invalid,
    not_found,
    nul_field,
    precondition,
)
from populora.seeds import derive_seed
from services.league.db import LeagueDB
from services.league.engine import (
    STUDENT_ROLES,
    TEACHER_ROLES,
    AdapterRow,
    AdapterSpecIn,
    ChildSpec,
    Conflict,
    EvalRow,
    InvalidRequest,
    MatchReport,
    PhaseRow,
    RatingRules,
    UnknownEntity,
)
from services.league.pfsp import PfspParams, draw, pfsp_weights
from services.league.ratings import RatingParams, win_probability_matrix
from services.league.selection import Member, select_for_replacement

USAGE_FIELDS = ("generated_tokens", "trained_tokens", "sandbox_jobs")
ROW_BLOCK = 128  # teachers per block in matchmaking: (128, S) float32 temporaries are 250 KB at S = 500


def _status_codes(method):
    """The league's plain errors as the service's: a refused request (an id that breaks populora.names included) is
    INVALID_ARGUMENT, a write that contradicts what exists ALREADY_EXISTS, an unknown run or adapter NOT_FOUND, a
    database that does not answer UNAVAILABLE (the gRPC server and the REST app both map ServiceError further)."""

    @functools.wraps(method)
    def mapped(*args, **kwargs):
        for name, value in [*enumerate(args[1:]), *kwargs.items()]:
            bad = nul_field(value) if isinstance(value, Message) else (
                "argument" if isinstance(value, str) and "\x00" in value else "")
            if bad:
                raise invalid(f"{bad if bad != 'argument' else name}: text must not contain NUL (0x00) characters")
            if isinstance(value, Message):
                check_names(value)
        try:
            return method(*args, **kwargs)
        except Conflict as e:
            raise conflict(str(e)) from None
        except InvalidRequest as e:
            raise invalid(str(e)) from None
        except UnknownEntity as e:
            raise not_found(str(e)) from None
        except sa.exc.DBAPIError as e:
            if not db_unavailable(e):
                raise
            # the transaction was rolled back whole: the caller may send the same request again (all are idempotent)
            why = " ".join(str(e.orig).split())
            raise ServiceError(grpc.StatusCode.UNAVAILABLE, f"the league database does not answer "
                                                            f"({type(e.orig).__name__}: {why}); try again (every "
                                                            "write is idempotent)") from None

    return mapped


@dataclass(frozen=True)
class SelectionParams:
    """Evolutionary replacement settings (spec 8): replace ceil(gamma*N), parents by tournaments of this size."""

    gamma: float = 0.25
    tournament_size: int = 2


def rating_to_pb(a: AdapterRow, k: float) -> league_pb2.Rating:
    return league_pb2.Rating(adapter_id=a.adapter_id, role=a.role, mu=a.mu, sigma=a.sigma,
                             conservative_skill=a.mu - k * a.sigma, status=a.status, matches=a.matches,
                             wins=a.wins, losses=a.losses, draws=a.draws, parents=a.parents,
                             operator=a.operator, created_step=a.created_step)


def _step_row_rpc(name: str, record: str, field: str, response: type[Message]):
    """An RPC that replaces one JSON row of a step (its summary, its problems) and says whether one was there:
    `record` names the LeagueDB method, `field` the request's JSON text."""

    def rpc(self, request):
        return response(replaced=getattr(self.db, record)(request.run_id, request.step, getattr(request, field),
                                                          time.time()))

    rpc.__name__ = rpc.__qualname__ = name
    return _status_codes(rpc)


class LeagueService:
    """One method per RPC of proto/league.proto; the database does the storing, the domain modules the math."""

    CONTRACT = CONTRACTS["league"]

    def __init__(self, db: LeagueDB, pfsp: PfspParams = PfspParams(), selection: SelectionParams = SelectionParams(),
                 token: str = "", read_cache_s: float = 1.0, read_queries: int = 0):
        self.db = db
        self.rules = db.rules
        self.pfsp = pfsp
        self.selection = selection
        self.token = token
        self.read_cache_s = read_cache_s
        self.read_queries = read_queries or 2 * (os.cpu_count() or 1)

    @classmethod
    def from_config(cls, cfg: Config, url: str | None = None, migrate: bool = True) -> LeagueService:
        """Build from `cfg.league` and `cfg.evolution`; upgrades the database schema to head first. The reads go
        through league.read_db_url where it is set (and `url` is not given)."""
        lg = cfg.league
        rules = RatingRules(RatingParams(lg.mu, lg.sigma, lg.beta, lg.tau, lg.draw_probability, lg.k),
                            lg.outcome, lg.margin, lg.payoff_decay)
        db = LeagueDB(url or cfg.league_db_url, rules, read_url="" if url else cfg.resolve(lg.read_db_url))
        if migrate:
            db.migrate()
        return cls(db, PfspParams(lg.pfsp, lg.pfsp_p, lg.pfsp_floor),
                   SelectionParams(cfg.evolution.gamma, cfg.evolution.tournament_size),
                   token=cfg.services.token, read_cache_s=lg.read_cache_s, read_queries=lg.read_queries)

    def close(self) -> None:
        self.db.close()

    def _pb(self, a: AdapterRow) -> league_pb2.Rating:
        return rating_to_pb(a, self.rules.params.k)

    # ---- RPCs ---------------------------------------------------------------------------------------------------
    @_status_codes
    def CreateRun(self, request: league_pb2.CreateRunRequest) -> league_pb2.CreateRunResponse:
        created = self.db.create_run(request.run_id, request.mode, request.config_yaml)
        return league_pb2.CreateRunResponse(run_id=request.run_id, created=created)

    @_status_codes
    def RegisterAdapters(self, request: league_pb2.RegisterAdaptersRequest) -> league_pb2.RegisterAdaptersResponse:
        specs = [AdapterSpecIn(a.adapter_id, a.role, a.rank, a.created_step) for a in request.adapters]
        rows = self.db.register_adapters(request.run_id, specs)
        return league_pb2.RegisterAdaptersResponse(ratings=[self._pb(a) for a in rows])

    @_status_codes
    def Matchmake(self, request: league_pb2.MatchmakeRequest) -> league_pb2.MatchmakeResponse:
        """For every active teacher and task type, draw one student by PFSP (spec 7), deterministically for
        (run, step, seed, ratings). A teacher is never paired with itself unless it is the only candidate, as the
        baseline's single `both` adapter is."""
        task_types = list(request.task_types) or list(CODE_TASK_TYPES)
        for i, tt in enumerate(task_types):
            if tt not in TASK_TYPES:
                raise invalid(f"task_types[{i}]: '{tt}' is not one of {list(TASK_TYPES)}")
        active = self.db.active_skills(request.run_id)  # (id, role, mu, sigma), by id
        teachers = [a for a in active if a[1] in TEACHER_ROLES]
        students = [a for a in active if a[1] in STUDENT_ROLES]
        if not teachers or not students:
            raise precondition(f"run '{request.run_id}' has {len(teachers)} active teacher(s) and {len(students)} "
                               "active student(s); register both roles before matchmaking")
        rng = np.random.Generator(np.random.PCG64(derive_seed(request.run_id, request.step, request.seed)))
        uniforms = rng.random((len(teachers), len(task_types)))  # (T, K)
        picks, p_picked = self._draw_students(teachers, students, uniforms)  # (T, K) each
        run, step = request.run_id, request.step
        teacher_ids = [a[0] for a in teachers]
        student_ids = [a[0] for a in students]
        resp = league_pb2.MatchmakeResponse()
        add = resp.pairings.add
        for k, tt in enumerate(task_types):
            for t, j, p in zip(teacher_ids, picks[:, k].tolist(), p_picked[:, k].tolist()):
                add(match_id=f"{run}/{step}/{t}/{tt}", teacher_id=t, student_id=student_ids[j], task_type=tt,
                    step=step, p_student=p)
        return resp

    def _draw_students(self, teachers: list[tuple], students: list[tuple],
                       uniforms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For teacher i and draw k, the student index picked by inverse CDF with uniforms[i, k] under the PFSP
        weights (spec 7), and its probability. Rows are (adapter_id, role, mu, sigma).

        Works through the teachers in blocks of ROW_BLOCK rows: the (block, S) temporaries stay in the CPU cache
        and in memory the allocator reuses, where whole (T, S) matrices would be fresh pages on every call (a
        500 x 500 matrix is 1 MB; faulting in a dozen of them cost more than all the arithmetic). Each row's draw
        depends only on its own weights and uniforms, so the result does not depend on the block size.
        """
        t = np.array([a[2:4] for a in teachers], dtype=np.float32)  # (T, 2): mu, sigma
        s = np.array([a[2:4] for a in students], dtype=np.float32)  # (S, 2)
        n_t, n_k = uniforms.shape
        picks = np.empty((n_t, n_k), dtype=np.int64)
        p_picked = np.empty((n_t, n_k), dtype=np.float64)
        column = {a[0]: j for j, a in enumerate(students)}
        for lo in range(0, n_t, ROW_BLOCK):
            hi = min(lo + ROW_BLOCK, n_t)
            weights = self._pfsp_weights(t[lo:hi], s, teachers[lo:hi], column)  # (B, S), rows unnormalised
            block = draw(weights, uniforms[lo:hi])  # (B, K)
            picks[lo:hi] = block
            totals = weights.sum(axis=1, dtype=np.float64)  # (B,)
            p_picked[lo:hi] = weights[np.arange(hi - lo)[:, None], block] / totals[:, None]
        return picks, p_picked

    def _pfsp_weights(self, t: np.ndarray, s: np.ndarray, teachers: list[tuple],
                      column: dict[str, int]) -> np.ndarray:
        """PFSP weights of teacher i drawing student j, x_ij = P(teacher i beats student j) (spec 6-7), for the
        (mu, sigma) rows `t` of `teachers` against `s`; self-pairs allowed only where a teacher has no other
        candidate (`column` maps a student's id to its column)."""
        # float32: sampling weights need no more, and it halves the cost of the (T, S) matrix math.
        x = win_probability_matrix(t[:, 0], t[:, 1], s[:, 0], s[:, 1], self.rules.params.beta)  # (B, S)
        both = [i for i, a in enumerate(teachers) if a[1] == "both"]
        if not both:
            return pfsp_weights(x, self.pfsp)
        # Only `both` adapters can meet themselves: mask those cells, unless that is the teacher's only candidate.
        allowed = np.ones(x.shape, dtype=bool)
        for i in both:
            allowed[i, column[teachers[i][0]]] = len(column) == 1
        return pfsp_weights(x, self.pfsp, allowed)

    @_status_codes
    def ReportMatches(self, request: league_pb2.ReportMatchesRequest) -> league_pb2.ReportMatchesResponse:
        reports = [MatchReport(m.match_id, m.teacher_id, m.student_id, m.task_type, m.step, tuple(m.rhos))
                   for m in request.matches]
        BATCH_SIZE.labels("league", "ReportMatches").observe(len(reports))
        out = self.db.report_matches(request.run_id, reports)
        return league_pb2.ReportMatchesResponse(applied=out.applied, duplicates=out.duplicates,
                                                ratings=[self._pb(a) for a in out.ratings])

    @_status_codes
    def SelectForReplacement(self, request: league_pb2.SelectForReplacementRequest
                             ) -> league_pb2.SelectForReplacementResponse:
        """For each sub-population (teachers, students; a `both` adapter is its own), the worst ceil(gamma*N) by
        mu - k*sigma and two parents each from the survivors' top half (spec 8). Writes nothing.

        Chosen among the members as they stood before this step's evolution (those it retired included, the children
        it made left out), so a step whose evolution is asked again after it was recorded (a killed worker's job,
        taken over) gets the same answer."""
        k = self.rules.params.k
        active = [a for a in self.db.adapters(request.run_id, include_retired=True)
                  if a.created_step < request.step and (a.status == "active" or a.retired_step == request.step)]
        rng = random.Random(derive_seed(request.run_id, request.step, request.seed, "select"))
        plans = []
        for role in ROLES:
            members = [Member(a.adapter_id, a.mu - k * a.sigma) for a in active if a.role == role]
            plans += select_for_replacement(role, members, self.selection.gamma, self.selection.tournament_size,
                                            rng)
        return league_pb2.SelectForReplacementResponse(replacements=[
            league_pb2.Replacement(role=p.role, retire_id=p.retire_id, parent_ids=p.parent_ids) for p in plans])

    @_status_codes
    def RecordChild(self, request: league_pb2.RecordChildRequest) -> league_pb2.RecordChildResponse:
        child = self.db.record_child(request.run_id, ChildSpec(
            request.child_id, request.role, tuple(request.parent_ids), request.operator, request.params_json or "{}",
            request.seed, request.step, request.retire_id, request.rank))
        return league_pb2.RecordChildResponse(child=self._pb(child))

    @_status_codes
    def GetRatings(self, request: league_pb2.GetRatingsRequest) -> league_pb2.GetRatingsResponse:
        rows = self.db.adapters(request.run_id, request.role, request.include_retired)
        return league_pb2.GetRatingsResponse(ratings=[self._pb(a) for a in rows])

    @_status_codes
    def GetLineage(self, request: league_pb2.GetLineageRequest) -> league_pb2.GetLineageResponse:
        ancestors, descendants = self.db.lineage(request.adapter_id)

        def edges(es):
            return [league_pb2.LineageEdge(parent_id=e.parent_id, child_id=e.child_id, operator=e.operator,
                                           step=e.step) for e in es]

        return league_pb2.GetLineageResponse(adapter_id=request.adapter_id, ancestors=edges(ancestors),
                                             descendants=edges(descendants))

    @_status_codes
    def RecordCompute(self, request: league_pb2.RecordComputeRequest) -> league_pb2.RecordComputeResponse:
        usage = [(u.adapter_id, Usage(u.generated_tokens, u.trained_tokens, u.sandbox_jobs)) for u in request.usage]
        return league_pb2.RecordComputeResponse(rows=self.db.record_compute(request.run_id, request.step, usage))

    @_status_codes
    def GetCompute(self, request: league_pb2.GetComputeRequest) -> league_pb2.GetComputeResponse:
        summary = self.compute_summary(request.run_id)

        def usage(adapter_id: str, u: dict) -> league_pb2.Usage:
            return league_pb2.Usage(adapter_id=adapter_id, **u)

        return league_pb2.GetComputeResponse(
            total=usage("", summary["total"]), adapters=[usage(a, u) for a, u in summary["adapters"].items()],
            steps=[league_pb2.StepCompute(step=s["step"], total=usage("", {k: s[k] for k in USAGE_FIELDS}))
                   for s in summary["steps"]])

    @_status_codes
    def RecordEvals(self, request: league_pb2.RecordEvalsRequest) -> league_pb2.RecordEvalsResponse:
        rows = [EvalRow(EvalScore(e.adapter_id, e.version, e.label, e.pass_at_1,
                                  {str(k): v for k, v in e.pass_at_k.items()}, e.n_problems, e.samples,
                                  [ProblemScore(p.problem_id, p.passed, p.n, p.error) for p in e.problems]),
                        e.benchmark, e.step) for e in request.scores]
        return league_pb2.RecordEvalsResponse(recorded=self.db.record_evals(request.run_id, rows, time.time()))

    @_status_codes
    def GetEvals(self, request: league_pb2.GetEvalsRequest) -> league_pb2.GetEvalsResponse:
        rows = self.db.evals(request.run_id, request.adapter_id, request.benchmark, request.include_problems)
        return league_pb2.GetEvalsResponse(scores=[league_pb2.EvalScore(
            adapter_id=s.adapter_id, version=s.version, benchmark=r.benchmark, step=r.step, label=s.label,
            n_problems=s.n_problems, samples=s.samples, pass_at_1=s.pass_at_1,
            pass_at_k={int(k): v for k, v in s.pass_at_k.items()}, recorded_at=r.recorded_at,
            problems=[league_pb2.EvalProblem(problem_id=p.id, passed=p.passed, n=p.n, error=p.error)
                      for p in s.problems]) for r, s in ((r, r.score) for r in rows)])

    RecordStepSummary = _step_row_rpc("RecordStepSummary", "record_step_summary", "summary_json",
                                      league_pb2.RecordStepSummaryResponse)

    @_status_codes
    def RecordRun(self, request: league_pb2.RecordRunRequest) -> league_pb2.RecordRunResponse:
        return league_pb2.RecordRunResponse(created=self.db.record_run(
            request.run_id, request.mode, request.config_yaml, request.status, time.time()))

    @_status_codes
    def RecordPhases(self, request: league_pb2.RecordPhasesRequest) -> league_pb2.RecordPhasesResponse:
        rows = []
        for i, p in enumerate(request.phases):
            if p.error and not p.failed:
                raise invalid(f"phases[{i}].error: only a phase that failed has an error (set failed)")
            rows.append(PhaseRow(p.step, p.phase, p.seconds, p.attempts, p.finished_at,
                                 p.error if p.failed else None))
        return league_pb2.RecordPhasesResponse(recorded=self.db.record_phases(request.run_id, rows))

    RecordStepProblems = _step_row_rpc("RecordStepProblems", "record_step_problems", "problems_json",
                                       league_pb2.RecordStepProblemsResponse)

    @_status_codes
    def eval_scores(self, run_id: str, adapter_id: str = "", benchmark: str = "", include_problems: bool = False
                    ) -> dict:
        """A run's benchmark scores as JSON for the REST API: the bare base model's adapter_id is null."""
        rows = self.db.evals(run_id, adapter_id, benchmark, include_problems)
        return {"run_id": run_id, "adapter_id": adapter_id or None, "evals": [{
            "adapter_id": s.adapter_id or None, "version": s.version, "benchmark": r.benchmark, "step": r.step,
            "label": s.label, "n_problems": s.n_problems, "samples": s.samples, "pass_at_1": s.pass_at_1,
            "pass_at_k": dict(sorted(s.pass_at_k.items(), key=lambda kv: int(kv[0]))), "recorded_at": r.recorded_at,
            "problems": [dataclasses.asdict(p) for p in s.problems] if include_problems else None}
            for r, s in ((r, r.score) for r in rows)]}

    # ---- reads for the REST API (the others are in reads.py) ------------------------------------------------------
    @_status_codes
    def payoff_matrix(self, run_id: str) -> dict:
        """The teacher x student payoff matrix: decayed mean solve rate per cell (None where never matched)."""
        cells = self.db.payoff(run_id)
        teachers = sorted({t for t, _, _ in cells})
        students = sorted({s for _, s, _ in cells})
        ti = {t: i for i, t in enumerate(teachers)}
        si = {s: j for j, s in enumerate(students)}
        solve: list[list[float | None]] = [[None] * len(students) for _ in teachers]
        count = [[0] * len(students) for _ in teachers]
        for t, s, c in cells:
            solve[ti[t]][si[s]] = c.solve_rate
            count[ti[t]][si[s]] = c.matches
        return {"run_id": run_id, "decay": self.rules.payoff_decay, "teachers": teachers, "students": students,
                "solve_rate": solve, "matches": count}

    @_status_codes
    def compute_summary(self, run_id: str) -> dict:
        """A run's compute (spec 14): total, per adapter, and per step with the running total, from the rows the
        coordinator records after each step."""
        zero = dict.fromkeys(USAGE_FIELDS, 0)
        total, adapters, steps = dict(zero), {}, {}
        for step, adapter_id, row in self.db.compute(run_id):
            per_adapter = adapters.setdefault(adapter_id, dict(zero)) if adapter_id else None
            per_step = steps.setdefault(step, dict(zero))
            for k in USAGE_FIELDS:
                v = getattr(row, k)
                total[k] += v
                per_step[k] += v
                if per_adapter is not None:
                    per_adapter[k] += v
        running, out = dict(zero), []
        for step in sorted(steps):
            for k in USAGE_FIELDS:
                running[k] += steps[step][k]
            out.append({"step": step, **steps[step], "cumulative_tokens": running["generated_tokens"]
                        + running["trained_tokens"]})
        return {"run_id": run_id, "total": total, "total_tokens": total["generated_tokens"] + total["trained_tokens"],
                "adapters": dict(sorted(adapters.items())), "steps": out}
