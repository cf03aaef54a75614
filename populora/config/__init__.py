"""The one configuration schema of PopuLoRA: pydantic models, presets, overrides, and the loader.

Every default marked [choice] in docs/algorithm.md is a field here with that default; the docstring of each
field says what it means and cites the spec section. Load a config with `load_config(preset=..., overrides=...)`.
The sections live by concept (`run`, `learning`, `population`, `deployment`), the root `Config` in `schema`, the
loader in `loader`; every public name is importable from `populora.config`, as users and the docs import it.
"""

from populora.config.base import (
    ALL_TARGET_MODULES,
    CODE_TASK_TYPES,
    MATH_TASK_TYPES,
    MAX_RANK,
    OPERATORS,
    ROLES,
    TASK_TYPES,
    ConfigError,
    Section,
)
from populora.config.deployment import (
    OutageConfig,
    QueueConfig,
    SandboxConfig,
    ServiceEndpoint,
    ServicesConfig,
    StoreConfig,
)
from populora.config.learning import EvalConfig, RewardConfig, TasksConfig, TrainerConfig, WarmStartConfig
from populora.config.loader import (
    ENV_ALIASES,
    LEGACY_FIELDS,
    PRESET_DIR,
    config_from_yaml,
    list_presets,
    load_config,
    parse_override,
)
from populora.config.population import EvolutionConfig, LeagueConfig, PopulationConfig
from populora.config.run import GenerationConfig, LoopConfig, LoraConfigModel, ModelConfig, RunConfig
from populora.config.schema import Config, field_docs

__all__ = [
    "ALL_TARGET_MODULES", "ENV_ALIASES", "LEGACY_FIELDS", "MAX_RANK", "OPERATORS", "PRESET_DIR", "ROLES", "TASK_TYPES", "Config",
    "CODE_TASK_TYPES", "MATH_TASK_TYPES",
    "ConfigError", "EvalConfig", "EvolutionConfig", "GenerationConfig", "LeagueConfig", "LoopConfig",
    "LoraConfigModel", "ModelConfig", "OutageConfig", "PopulationConfig", "QueueConfig", "RewardConfig", "RunConfig",
    "SandboxConfig",
    "Section", "ServiceEndpoint", "ServicesConfig", "StoreConfig", "TasksConfig", "TrainerConfig", "WarmStartConfig",
    "config_from_yaml", "field_docs", "list_presets", "load_config", "parse_override",
]
