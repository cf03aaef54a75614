"""The on-disk layout of an experiment's evaluations: `evals/<run>.<benchmark>.json` under the experiment's
directory, one file per arm run and benchmark (the layout `populora eval --out` writes), each written whole."""

from __future__ import annotations

import json
from pathlib import Path


def eval_path(out_dir: Path, run_id: str, benchmark: str) -> Path:
    """Where one arm run's scores on one benchmark are kept, under the experiment's directory `out_dir`."""
    return out_dir / "evals" / f"{run_id}.{benchmark}.json"


def shard_evals_path(shard_dir: Path, run_id: str) -> Path:
    """Where a committed shard keeps one arm run's scores: every benchmark's in one file named by the run alone. The
    file holds the project's own outcomes (problem ids and numbers); a name ending in a published benchmark's would
    read as a copy of that benchmark, which the tree never carries."""
    return shard_dir / "evals" / f"{run_id}.json"


def read_shard_evals(shard_dir: Path, run_id: str) -> dict[str, dict]:
    """{benchmark: scores} of one arm run in a committed shard; {} when it has none."""
    path = shard_evals_path(shard_dir, run_id)
    return json.loads(path.read_text())["benchmarks"] if path.exists() else {}


OVERLAP_FILE = "heldout_overlap.json"  # which held-out templates share behaviour with the warm start (evals.overlap)


def removed_templates(out_dir: Path) -> dict[str, list[str]]:
    """{held-out template: the warm-start templates (or the seed) it shares behaviour with} of the experiment, from
    its OVERLAP_FILE: its families are left out of the `heldout` headline; {} when the file is not there."""
    path = out_dir / OVERLAP_FILE
    if not path.exists():
        return {}
    return {k: v for k, v in json.loads(path.read_text())["shared"].items() if v}


def write_json(path: Path, data: dict) -> None:
    """`data` as indented, key-sorted JSON, replacing `path` in one rename, so a stop never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def load_evals(out_dir: Path, run_ids: list[str], benchmarks: list[str]) -> dict[str, dict[str, dict]]:
    """{run_id: {benchmark: scores}} of every evaluation of these runs on disk."""
    out: dict[str, dict[str, dict]] = {}
    for run_id in run_ids:
        for benchmark in benchmarks:
            path = eval_path(out_dir, run_id, benchmark)
            if path.exists():
                out.setdefault(run_id, {})[benchmark] = json.loads(path.read_text())
    return out
