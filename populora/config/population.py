"""Config sections of the population: its sizes, the league that rates and pairs its members, and evolution."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from populora.config.base import OPERATORS, Section, check_ranks


class PopulationConfig(Section):
    n_teachers: int = Field(4, ge=1)
    """Teachers T1..Tn (spec 1: standard 4)."""
    n_students: int = Field(4, ge=1)
    """Students S1..Sm (spec 1: standard 4)."""

class LeagueConfig(Section):
    mu: float = 25.0
    """TrueSkill initial mean mu0 (spec 6)."""
    sigma: float = 25.0 / 3
    """TrueSkill initial deviation sigma0 (spec 6)."""
    beta: float = 25.0 / 6
    """TrueSkill performance deviation beta = sigma0/2 (spec 6)."""
    tau: float = 25.0 / 300
    """TrueSkill dynamics tau = sigma0/100 (spec 6)."""
    draw_probability: float = Field(0.10, ge=0, lt=1)
    """TrueSkill draw probability (spec 6)."""
    k: float = Field(3.0, ge=0)
    """Conservative skill = mu - k*sigma (spec 6)."""
    outcome: Literal["aggregate", "per_task"] = "aggregate"
    """[choice] One game per match from mean rho with a margin, or one game per task (spec 6)."""
    margin: float = Field(0.05, ge=0, lt=0.5)
    """[choice] Student wins if mean rho > 0.5 + margin, teacher if < 0.5 - margin, else draw (spec 6)."""
    pfsp: Literal["var", "hard"] = "var"
    """PFSP weighting: f_var(x) = x(1-x) or f_hard(x) = (1-x)^p (spec 7)."""
    pfsp_p: float = Field(2.0, gt=0)
    """Exponent p of f_hard (spec 7)."""
    pfsp_floor: float = Field(0.01, ge=0)
    """Floor on each PFSP weight, so every pairing stays possible (spec 7)."""
    payoff_decay: float = Field(0.9, gt=0, le=1)
    """Exponential decay of the teacher x student payoff matrix per new match."""
    db_url: str = "sqlite:///{output_dir}/league.sqlite"
    """SQLAlchemy URL of the league database; `{output_dir}` is filled in. Distributed: postgresql+psycopg://...
    The league connects as the role that owns the schema (it runs the migrations); the coordinator's is its
    journal's URL, as a role that may use the journal's tables only (python -m coordinator.pgroles)."""
    read_db_url: str = ""
    """The league's reads (REST, the dashboard's views, gRPC reads) connect with this URL where it is set: a
    database role that can read the league's tables and write nothing (python -m coordinator.pgroles). `populora
    dashboard` reads through it too. Empty: db_url."""
    read_cache_s: float = Field(1.0, ge=0)
    """REST read cache lifetime in seconds (leaderboard, payoff); writes through the same service invalidate it at
    once, so this only bounds how stale writes made by another league replica can look. 0 = no cache."""
    read_queries: int = Field(0, ge=0, le=1024)
    """REST reads that query the database at once (the leaderboard, curves, lineage...); the others wait their turn
    in arrival order. A few queries in flight keep the cores busy; dozens only share them out unevenly, which is
    what a slow tail is made of. 0 = twice the CPU cores."""


class EvolutionConfig(Section):
    every_k: int = Field(10, ge=1)
    """[choice] Replace members every k steps (spec 8: default 10)."""
    gamma: float = Field(0.25, gt=0, lt=1)
    """[choice] Fraction of each sub-population replaced: ceil(gamma*N) (spec 8)."""
    tournament_size: int = Field(2, ge=1)
    """[choice] Tournament size for drawing a pair of parents from the top half (spec 8)."""
    operator_mix: dict[str, float] = Field(
        default_factory=lambda: {"M1": 0.2, "M2": 0.1, "M3": 0.1, "M4": 0.1, "X1": 0.15, "X2": 0.1,
                                 "X3": 0.1, "X4": 0.15})
    """[choice] Probability of each operator when making a child (spec 9)."""
    epsilon: float = Field(0.1, gt=0, le=1)
    """[choice] Mutation scale epsilon of M1-M3 (spec 9)."""
    m4_epsilon: float = Field(0.15, gt=0, le=1)
    """[choice] Mutation scale of M4 (spec 9)."""
    self_adapt_epsilon: bool = True
    """[choice] Self-adapt epsilon per member: log eps += tau * N(0,1), clamped (spec 9)."""
    epsilon_tau: float = Field(0.05, ge=0)
    """[choice] Step size of the log-normal self-adaptation (spec 9)."""
    epsilon_min: float = Field(1e-4, gt=0)
    """Lower clamp of a self-adapted epsilon (spec 9)."""
    epsilon_max: float = Field(1.0, gt=0)
    """Upper clamp of a self-adapted epsilon (spec 9)."""
    m2_fraction: float = Field(0.33, gt=0, le=1)
    """[choice] Fraction of modules M2 perturbs, at least one (spec 9)."""
    m3_fraction: float = Field(0.05, gt=0, lt=1)
    """[choice] Fraction of singular components M3 zeroes, ceil(fraction * r) (spec 9 says 0.3). 0.05 (one
    component at rank 8-16): at 0.3 a trained rank-16 child moved 0.56 from its parent, 2.5x the ε-mutations, and
    its students solved 0.06 on their first step against their parents' 0.27 (docs/evolver.md)."""
    dare_p: float = Field(0.7, ge=0, lt=1)
    """[choice] DARE drop probability p of X1 (spec 9)."""
    x4_eta_min: float = Field(1.0, ge=0)
    """[choice] X4 extrapolation eta ~ U(min, max) (spec 9)."""
    x4_eta_max: float = Field(1.5, ge=0)
    """[choice] X4 extrapolation eta ~ U(min, max) (spec 9)."""
    ranks: list[int] = Field(default_factory=list)
    """[choice] Ranks a child of R1 may take besides those the members start with (lora.rank, teacher_ranks,
    student_ranks); R1 moves a member to the next larger or the next smaller of them (spec 9, "Mixed ranks").
    Every rank of a run is known at its start, so inference serves them all (its largest is vLLM's max_lora_rank)."""
    crossover_rank: Literal["first", "larger", "smaller"] = "first"
    """[choice] The rank of a crossover's child whose parents' ranks differ: the better parent's (`first`, spec 9's
    default), the larger or the smaller; the parents' updates are brought to it through their exact SVDs
    (docs/evolver.md, "Mixed ranks")."""
    threads: int = Field(1, ge=0)
    """Torch threads of the evolver's math while it makes a child; 0 = leave torch's setting. Its work is many small
    (r x r) decompositions and tall-skinny products, where one thread was ~10x faster than two on a loaded 2-core
    machine (docs/evolver.md)."""
    device: str = Field("cpu", pattern=r"^(cpu|auto|cuda(:\d+)?)$")
    """Where the operators' full-size work runs (Grams, tall products, noise and masks): `cpu`, `cuda`, `cuda:N`, or
    `auto` (a GPU when there is one). The r x r decompositions stay on the CPU; a child is reproducible from its
    seed on one kind of device (a GPU draws its noise and masks from its own generator) (docs/evolver.md)."""

    @field_validator("operator_mix")
    @classmethod
    def _known_operators(cls, mix: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(mix) - set(OPERATORS))
        if unknown:
            raise ValueError(f"unknown operator(s) {unknown}; allowed: {list(OPERATORS)}")
        if any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
            raise ValueError("weights must be >= 0 and sum to more than 0")
        return mix

    def crossover_child_rank(self, ranks: list[int]) -> int:
        """A crossover child's rank from its parents' ranks, better parent first (crossover_rank)."""
        return {"larger": max, "smaller": min}.get(self.crossover_rank, lambda rs: rs[0])(ranks)

    @field_validator("ranks")
    @classmethod
    def _ranks_in_range(cls, ranks: list[int]) -> list[int]:
        return check_ranks(ranks)
