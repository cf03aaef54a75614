"""The one config loader: presets and files, POPULORA* environment variables, `--set` overrides, stored runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from populora.config.base import ConfigError
from populora.config.schema import Config

PRESET_DIR = Path(__file__).resolve().parents[2] / "configs"


def list_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set '{dotted}': '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", value parsed as YAML: numbers, booleans, lists, strings)."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' is not of the form section.field=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override '{text}' has no field name")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


# Environment variables that name one field directly (secrets are set this way in containers and CI).
ENV_ALIASES = {"POPULORA_TOKEN": "services.token"}


def _environment() -> dict[str, str]:
    """The POPULORA* environment variables, where NAME_FILE=PATH (NAME an alias or a POPULORA__ variable) stands for
    NAME set to the file's content, final newline dropped: how Docker and Kubernetes hand a container its secrets
    without putting them in any process's environment, which a job in the gVisor sandbox could read."""
    env = {k: v for k, v in os.environ.items() if k.startswith("POPULORA")}
    for name in [n for n in env if n.endswith("_FILE")]:
        target = name.removesuffix("_FILE")
        if target not in ENV_ALIASES and not target.startswith("POPULORA__"):
            continue
        if target in env:
            raise ConfigError(f"both {target} and {name} are set; set only one of them")
        path = env.pop(name)
        try:
            env[target] = Path(path).read_text().removesuffix("\n")
        except OSError as e:
            raise ConfigError(f"{name}={path}: cannot read the file ({e.strerror}); it must hold the value of "
                              f"{target}") from None
    return env


def _env_overrides() -> list[tuple[str, Any]]:
    """POPULORA__SECTION__FIELD=value environment variables (how containers configure services), and the aliases
    of ENV_ALIASES (taken as plain strings); either may come from a file (NAME_FILE, see _environment)."""
    environ = _environment()
    out: list[tuple[str, Any]] = [(field, environ[name]) for name, field in ENV_ALIASES.items()
                                  if environ.get(name)]
    for name, raw in sorted(environ.items()):
        if name.startswith("POPULORA__") and len(name) > len("POPULORA__"):
            dotted = ".".join(p.lower() for p in name[len("POPULORA__"):].split("__"))
            out.append(parse_override(f"{dotted}={raw}"))
    return out


def _format_error(err: ValidationError, source: str) -> str:
    lines = [f"invalid configuration ({source}):"]
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        lines.append(f"  {field}: {msg}" + (f" (got {e['input']!r})" if "input" in e and e["type"] != "extra_forbidden"
                                             and not isinstance(e["input"], dict) else ""))
    return "\n".join(lines)


# Fields of earlier releases that a stored run's config may still hold: dropped on load.
LEGACY_FIELDS = ("league.token", "sandbox.token", "generation.lora_path")


def _drop_legacy(tree: dict[str, Any]) -> None:
    for dotted in LEGACY_FIELDS:
        section, name = dotted.split(".")
        if isinstance(tree.get(section), dict):
            tree[section].pop(name, None)


def _sections(text: str, what: str) -> dict[str, Any]:
    """The mapping of sections a YAML text holds (empty text: none); `what` names the text in errors."""
    try:
        tree = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{what} is not valid YAML: {e}") from e
    if not isinstance(tree, dict):
        raise ConfigError(f"{what} must hold a mapping of sections")
    return tree


def _validated(tree: dict[str, Any], source: str) -> Config:
    """The Config a tree of sections describes, or a ConfigError listing every field that is wrong in it."""
    try:
        return Config.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(_format_error(e, source)) from None


def config_from_yaml(text: str, source: str = "a stored run's config") -> Config:
    """A config a run stored (Config.to_yaml): no environment overrides, so the run keeps the settings it started
    with, except its secrets, which are never stored and come from the environment (ENV_ALIASES)."""
    tree = _sections(text, source)
    _drop_legacy(tree)
    environ = _environment()
    for name, dotted in ENV_ALIASES.items():
        if environ.get(name):
            _set_path(tree, dotted, environ[name])
    return _validated(tree, source)


def load_config(preset: str | None = None, path: str | Path | None = None,
                overrides: list[str] | None = None, env: bool = True) -> Config:
    """Preset or file, then POPULORA__* environment variables, then `--set` overrides; validated at the end."""
    tree: dict[str, Any] = {}
    source = "defaults"
    if path is None and preset is None and os.environ.get("POPULORA_CONFIG"):
        path = os.environ["POPULORA_CONFIG"]
    if preset is not None:
        file = PRESET_DIR / f"{preset}.yaml"
        if not file.exists():
            raise ConfigError(f"unknown preset '{preset}'; allowed: {list_presets()}")
        path, source = file, f"preset {preset}"
    if path is not None:
        file = Path(path)
        if not file.exists():
            raise ConfigError(f"config file not found: {file}")
        tree = _sections(file.read_text(), f"config file {file}")
        source = source if preset else str(file)
    _drop_legacy(tree)
    pairs = (_env_overrides() if env else []) + [parse_override(o) for o in overrides or []]
    for key, value in pairs:
        _set_path(tree, key, value)
    return _validated(tree, source)
