"""The root of the configuration schema: `Config`, the whole of a run's settings, made of the sections."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, model_validator

from populora.config.base import TASK_TYPES, Section
from populora.config.deployment import OutageConfig, QueueConfig, SandboxConfig, ServicesConfig, StoreConfig
from populora.config.learning import EvalConfig, RewardConfig, TasksConfig, TrainerConfig, WarmStartConfig
from populora.config.population import EvolutionConfig, LeagueConfig, PopulationConfig
from populora.config.run import GenerationConfig, LoopConfig, LoraConfigModel, ModelConfig, RunConfig


class Config(Section):
    """A whole PopuLoRA configuration."""

    run: RunConfig = RunConfig()
    """Run identity, length and mode."""
    loop: LoopConfig = LoopConfig()
    """How steps follow each other: lock-step or overlapped with bounded staleness (spec 16)."""
    model: ModelConfig = ModelConfig()
    """The frozen base model."""
    lora: LoraConfigModel = LoraConfigModel()
    """Shape of every adapter."""
    population: PopulationConfig = PopulationConfig()
    """Sizes of the two sub-populations."""
    tasks: TasksConfig = TasksConfig()
    """AZR task types, buffers and proposal validation (spec 2, 3, 10)."""
    rewards: RewardConfig = RewardConfig()
    """Rewards (spec 4)."""
    generation: GenerationConfig = GenerationConfig()
    """Inference backend and sampling."""
    trainer: TrainerConfig = TrainerConfig()
    """TRR++ updates (spec 5)."""
    warmstart: WarmStartConfig = WarmStartConfig()
    """The warm start before step 0: one adapter fitted on the answer formats, every member's start (spec 13)."""
    eval: EvalConfig = EvalConfig()
    """Held-out benchmarks: the in-training evaluation phase and `populora eval` defaults (docs/eval.md)."""
    league: LeagueConfig = LeagueConfig()
    """Ratings, matchmaking and the league database (spec 6-7)."""
    evolution: EvolutionConfig = EvolutionConfig()
    """Evolutionary replacement and operators (spec 8-9)."""
    sandbox: SandboxConfig = SandboxConfig()
    """The verifier: isolation, limits, external verifiers."""
    queue: QueueConfig = QueueConfig()
    """Step-phase queue."""
    outage: OutageConfig = OutageConfig()
    """Waiting out Postgres, Redis or a service going away (retries with exponential backoff, bounded)."""
    services: ServicesConfig = ServicesConfig()
    """Service endpoints (distributed mode)."""
    store: StoreConfig = StoreConfig()
    """The artifact store."""

    def use_deployment(self, deployment: str) -> None:
        """Run embedded (one process, in-process queue) or distributed (services over gRPC, Redis Streams), with the
        defaults that follow from it (the loop's staleness)."""
        self.run.deployment = deployment
        self.queue.backend = "redis" if deployment == "distributed" else "inprocess"
        self._default_staleness()

    def _default_staleness(self) -> None:
        """loop.max_staleness's default depends on the deployment: distributed, each role has its own machines, so
        steps overlap (1) unless the config says otherwise; embedded, lock-step (0, the field's default)."""
        if self.run.deployment == "distributed" and "max_staleness" not in self.loop.model_fields_set:
            self.loop.max_staleness = 1

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        if self.evolution.x4_eta_max < self.evolution.x4_eta_min:
            raise ValueError("evolution.x4_eta_max must be >= evolution.x4_eta_min")
        if self.evolution.epsilon_max < self.evolution.epsilon_min:
            raise ValueError("evolution.epsilon_max must be >= evolution.epsilon_min")
        self._default_staleness()
        if self.run.reproducible:  # a count that no load changes (run.reproducible)
            for section in (self.generation, self.trainer):
                if section.threads < 0:
                    section.threads = 1
        if self.evolution.operator_mix.get("R1", 0) > 0 and len(self.ranks) < 2:
            raise ValueError(f"evolution.operator_mix gives R1 (the rank change) a weight, but every member has rank "
                             f"{self.lora.rank}: name other ranks in evolution.ranks (e.g. [16, 64]) or in "
                             "lora.teacher_ranks / lora.student_ranks, or give R1 no weight")
        if self.generation.batch_invariant and self.generation.backend != "hf":
            raise ValueError("generation.batch_invariant is served by the hf backend only: vLLM batches requests "
                             "together whatever the setting; use generation.backend=hf")
        unknown = sorted(set(self.sandbox.verifiers) - set(TASK_TYPES))
        if unknown:
            raise ValueError(f"sandbox.verifiers: unknown task type(s) {unknown}; allowed: {list(TASK_TYPES)}")
        return self

    @property
    def ranks(self) -> list[int]:
        """Every rank an adapter of this run may hold, ascending: the members' initial ranks, the warm start's
        (lora.rank) and those R1 may move to (evolution.ranks). One entry for a run of one rank."""
        return sorted(self.lora.initial_ranks() | set(self.evolution.ranks))

    @property
    def serving_rank(self) -> int:
        """The rank inference is sized for (the hf backend's slot banks, vLLM's max_lora_rank): generation.max_lora_rank,
        raised to the largest rank of the run."""
        return max(self.generation.max_lora_rank, *self.ranks)

    # Paths with {output_dir} resolved.
    def resolve(self, template: str) -> str:
        return template.replace("{output_dir}", self.run.output_dir)

    @property
    def store_root(self) -> Path:
        return Path(self.resolve(self.store.root))

    @property
    def league_db_url(self) -> str:
        url = self.resolve(self.league.db_url)
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        return url

    @property
    def teacher_max_new_tokens(self) -> int:
        return self.generation.teacher_max_new_tokens or self.generation.max_new_tokens

    def to_yaml(self) -> str:
        """The config as YAML, as runs store it; secrets (services.token, services.tokens) are left out."""
        tree = self.model_dump(mode="json")
        tree["services"]["token"] = ""
        tree["services"]["tokens"] = {}
        return yaml.safe_dump(tree, sort_keys=False, width=110)


def hide_password(url: str) -> str:
    """A URL with the password of its user part as `***` (scheme://user:***@host...); others as they are."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in creds:
        return url
    return f"{scheme}{sep}{creds.split(':', 1)[0]}:***@{host}"


# the URLs of a config that may carry a database's or Redis' password
SECRET_URLS = (("league", "db_url"), ("league", "read_db_url"), ("sandbox", "db_url"), ("queue", "redis_url"))


def public_yaml(cfg: Config) -> str:
    """Config.to_yaml with the passwords of its database and Redis URLs as `***`: the copy other readers see (the
    league's record of a run, which its read-only role reads). The journal's own copy keeps them, for a resume."""
    tree = yaml.safe_load(cfg.to_yaml())
    for section, field in SECRET_URLS:
        value = tree.get(section, {}).get(field)
        if isinstance(value, str):
            tree[section][field] = hide_password(value)
    return yaml.safe_dump(tree, sort_keys=False, width=110)


def field_docs(model: type[BaseModel] = Config, prefix: str = "") -> dict[str, str]:
    """Every field's dotted path -> its documentation (used by `populora config docs` and the tests)."""
    out: dict[str, str] = {}
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out[path] = info.description or (ann.__doc__ or "")
            out.update(field_docs(ann, path + "."))
        else:
            out[path] = info.description or ""
    return out
