"""Which committed experiment a shard continues when the code has grown settings since the experiment's first shard.

An experiment's id digests its resolved config (coordinator/experiment/plan.py: default_id), and its shards are
compared by their config.yaml text (shardresult, recompute). A setting the code gained later changes both, though at
its default it changes nothing the committed shards ran: the next shard would start another experiment, or be
refused beside the others. So a shard is held to the committed config itself: its config must equal the first
committed shard's, except for settings the committed config does not hold that are at their defaults now, and
for where the machine keeps its files and finds its services (`WHERE`) (`compare`). Then it continues that experiment (`continued_id`, when no --id names one), and exports the committed
config.yaml text unchanged, so every later check still compares equal texts. Any other difference (a value changed,
a setting gone, a new setting away from its default) is refused before the shard trains, with the settings named.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from coordinator.experiment.shardresult import SHARD_FILE
from populora.config import Config, ConfigError

# Where a run keeps its files and finds its services, not what it trains: each machine has its own, and a shard on
# another machine (or in another directory) continues the experiment all the same.
WHERE = frozenset({"run.output_dir", "model.cache_dir", "warmstart.cache_dir", "league.db_url", "league.read_db_url",
                   "sandbox.db_url", "store", "queue", "services", "outage"})


def _tree(cfg: Config) -> dict:
    """The config as its shard's config.yaml holds it: validated again, as the experiment's plan makes it (settings
    set after validation, run.reproducible's thread counts, take effect)."""
    return yaml.safe_load(Config.model_validate(cfg.model_dump()).to_yaml())


def defaults() -> dict:
    """Every setting at the code's default, as a resolved config writes it."""
    return _tree(Config.model_validate({}))


def compare(committed: dict, current: dict, default: dict, path: str = "") -> tuple[list[str], list[str]]:
    """(settings `current` has, `committed` lacks, at their defaults; every other difference, named)."""
    added, differs = [], []
    for key in sorted(set(committed) | set(current)):
        where = f"{path}.{key}" if path else str(key)
        if where in WHERE:
            continue
        if key not in current:
            differs.append(f"{where} (in the committed config, gone from this code)")
        elif key not in committed:
            if isinstance(default, dict) and key in default and current[key] == default[key]:
                added.append(where)
            else:
                differs.append(f"{where} = {current[key]!r} (a setting the committed config lacks, not at its "
                               "default)")
        elif isinstance(committed[key], dict) and isinstance(current[key], dict):
            sub = default.get(key, {}) if isinstance(default, dict) else {}
            a, d = compare(committed[key], current[key], sub if isinstance(sub, dict) else {}, where)
            added += a
            differs += d
        elif committed[key] != current[key]:
            differs.append(f"{where}: {committed[key]!r} committed, {current[key]!r} here")
    return added, differs


def committed_config(results: Path) -> str | None:
    """The config.yaml text of the experiment's first committed shard (by name); None before its first."""
    found = sorted((results / "shards").glob(f"*/{SHARD_FILE}")) if (results / "shards").is_dir() else []
    return (found[0].parent / "config.yaml").read_text() if found else None


def continues(text: str, cfg: Config) -> list[str]:
    """The settings added since the committed config `text` (at their defaults); ConfigError naming every other
    difference."""
    added, differs = compare(yaml.safe_load(text), _tree(cfg), defaults())
    if differs:
        shown = "; ".join(differs[:8]) + (f"; and {len(differs) - 8} more" if len(differs) > 8 else "")
        raise ConfigError(f"this shard's config is not its experiment's committed config: {shown}. Run it with the "
                          "settings the committed shards ran with (their config.yaml), or give it another --id")
    return added


def continued_id(results_root: Path, stem: str, cfg: Config) -> str | None:
    """The one committed experiment under `results_root` of this label (`<stem>-exp-*`) whose config this one
    continues (`continues`); None when there is none. Two that both would is an error: name one with --id."""
    matches = []
    for d in sorted(results_root.glob(f"{stem}-exp-*")):
        text = committed_config(d)
        if text is None:
            continue
        try:
            continues(text, cfg)
        except ConfigError:
            continue
        matches.append(d.name)
    if len(matches) > 1:
        raise ConfigError(f"this config continues {len(matches)} committed experiments ({', '.join(matches)}): "
                          "name one with --id")
    return matches[0] if matches else None
