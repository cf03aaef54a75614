"""A seeded run's records, in a form that can be kept in the repository and compared: every phase result the
journal holds, and the league's adapters and lineage, with what a clock measured left out.

`tests/e2e/golden/cpu_tiny_records.json` holds the records of the seeded `cpu-tiny` embedded run (run id "e2e",
two steps, lock-step). A refactor must not change what a user's run produces, so
`test_the_seeded_run_has_the_committed_records` compares the run with the file (`golden_records`). Where a change
is meant to change the records (a new phase field, another sampling rule), write the file again with
`POPULORA_UPDATE_GOLDEN=1 pytest tests/e2e/test_embedded.py -k committed_records` and say why in the commit.

Long token-id lists are kept as a SHA-256 of their values (exact, but small); floats are compared with a relative
tolerance of 1e-6, since the last bits of a sum may differ between CPUs while the run's decisions do not.

The records hold what the echo model generated, and the echo model is fitted on each machine (tests/e2e/
echo_model.py): the fit's float order differs between CPU families, and so does what the model writes for the
prompts it was not fitted on. So the file keeps, beside the records, the SHA-256 of the model it was made with
(`cpu_tiny_records.model`), and applies only where the machine's echo model is that one. Elsewhere the comparison
with the file is skipped, the reason naming both digests: a run made here by this code is no stand-in for it.

The runs that must equal the one-process run (distributed, with replicas, over TLS, after an outage) are compared
with `reference_records`: the file where it applies, else the same seeded embedded run made on this machine by this
code (`made_here`: built once per model and source tree, in the cache, by one test worker while the other waits).
That comparison is real either way: two paths of one seeded run agreeing.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import sqlalchemy as sa

from populora.reproduce import differences, normal  # noqa: F401  (the tests compare runs with differences)

GOLDEN = Path(__file__).parent / "golden" / "cpu_tiny_records.json"
GOLDEN_MODEL = GOLDEN.with_suffix(".model")  # the SHA-256 of the echo model GOLDEN was made with
ROOT = Path(__file__).resolve().parents[2]
# what decides a seeded run's records besides the model: the code and the presets (and these tests' overrides)
SOURCES = ("populora", "coordinator", "services", "configs", "tests/e2e")
LONG_LIST = 16  # integer lists longer than this are kept as a digest


def run_records(state, league_db_url: str, run_id: str) -> dict:
    """The run's phase results (by "step/phase") and its league rows, clock readings left out."""
    phases = {f"{r['step']}/{r['phase']}": state.get(run_id, r["step"], r["phase"]) for r in state.phase_rows(run_id)}
    engine = sa.create_engine(league_db_url)
    try:
        with engine.connect() as c:
            adapters = [dict(r._mapping) for r in c.execute(sa.text(
                "SELECT adapter_id, role, status, mu, sigma, wins, losses, draws, matches, parents_json, operator"
                " FROM league_adapters WHERE run_id = :r ORDER BY adapter_id"), {"r": run_id})]
            lineage = [dict(r._mapping) for r in c.execute(sa.text(
                "SELECT parent_id, child_id, operator, step FROM league_lineage WHERE run_id = :r"
                " ORDER BY child_id, parent_id"), {"r": run_id})]
    finally:
        engine.dispose()
    return normal(json.loads(json.dumps({"phases": phases, "adapters": adapters, "lineage": lineage},
                                        default=str)), LONG_LIST)


def model_fingerprint(model_dir: str | Path) -> str:
    """The SHA-256 of a model directory's weights."""
    digest = hashlib.sha256()
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        digest.update(f.read_bytes())
    return digest.hexdigest()


def source_fingerprint() -> str:
    """The SHA-256 of every source file that can change a seeded run's records (not the golden records: writing
    them again leaves the run made here as it was)."""
    digest = hashlib.sha256()
    for top in SOURCES:
        for f in sorted((ROOT / top).rglob("*")):
            kept = f.suffix in (".py", ".yaml", ".json", ".model") and "__pycache__" not in f.parts
            if kept and f.parent != GOLDEN.parent:
                digest.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


def golden_mismatch(model_dir: str | Path) -> str | None:
    """Why GOLDEN cannot be compared on this machine, naming the echo models' SHA-256; None where it was made with
    this machine's echo model."""
    here = model_fingerprint(model_dir)
    if not GOLDEN_MODEL.exists():
        return (f"no digest of the echo model {GOLDEN.name} was made with ({GOLDEN_MODEL.name} is missing); "
                f"this machine's echo model is {here}")
    kept = GOLDEN_MODEL.read_text().strip()
    if kept != here:
        return (f"the echo model differs: {GOLDEN.name} was made with the echo model of SHA-256 {kept}, this "
                f"machine's is {here}")
    return None


def golden_applies(model_dir: str | Path) -> bool:
    """Whether GOLDEN was made with this machine's echo model."""
    return golden_mismatch(model_dir) is None


def golden_records(model_dir: str | Path) -> dict:
    """GOLDEN's records, as a run's are compared. Where GOLDEN was made with another echo model the calling test is
    skipped, with the reason naming both models' SHA-256: never compared with anything else, never passed."""
    why = golden_mismatch(model_dir)
    if why is not None:
        import pytest

        pytest.skip(f"the committed records do not apply on this machine: {why}")
    return normal(json.loads(GOLDEN.read_text()), LONG_LIST)


def write_golden(records: dict, model_dir: str | Path) -> None:
    GOLDEN.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    GOLDEN_MODEL.write_text(model_fingerprint(model_dir) + "\n")


def reference_records(echo_model: str | Path, make=None, run_id: str = "e2e", steps: int = 2,
                      extra: tuple[str, ...] = ()) -> dict:
    """The records a run must equal: those of the seeded embedded run of `run_id` for `steps` steps with the
    overrides `extra` after e2e_overrides (`make(workdir)` makes them instead where given). For the default run,
    GOLDEN where it was made with this machine's echo model; else `made_here`."""
    if run_id == "e2e" and steps == 2 and not extra and golden_applies(echo_model):
        return golden_records(echo_model)
    return made_here(echo_model, make, run_id, steps, extra)


def made_here(echo_model: str | Path, make=None, run_id: str = "e2e", steps: int = 2,
              extra: tuple[str, ...] = ()) -> dict:
    """The records of the seeded embedded run of `run_id` for `steps` steps with the overrides `extra` (or of
    `make(workdir)`), made on this machine by this code: once per model, source tree and run shape, kept in the
    cache."""
    from populora.models import atomic_dir, cache_dir

    make = make or (lambda work: seeded_records(work, str(echo_model), run_id, steps, extra))
    default = run_id == "e2e" and steps == 2 and not extra
    shape = "" if default else "-" + hashlib.sha256(json.dumps([run_id, steps, *extra]).encode()).hexdigest()[:12]
    key = f"{model_fingerprint(echo_model)[:16]}-{source_fingerprint()[:16]}{shape}"

    def build(tmp: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="e2e-reference-") as work:
            (tmp / "records.json").write_text(json.dumps(make(Path(work)), sort_keys=True))

    return json.loads((atomic_dir(cache_dir() / "e2e-records" / key, build) / "records.json").read_text())


def train(cfg, run_id: str, steps: int):
    """An embedded run of `cfg` for `steps` steps: (journal, run directory)."""
    from coordinator.run.journal import JournalDB
    from coordinator.train import run_training

    cfg.run.steps = steps  # before the run is created: the run is recorded with the config it trains with
    state = JournalDB(cfg.league_db_url)
    state.create_run(run_id, cfg.run.mode, cfg.to_yaml())
    return state, run_training(cfg, run_id, state)


def seeded_run(workdir: Path, echo_model: str, steps: int = 2, run_id: str = "e2e", extra: tuple[str, ...] = ()):
    """The seeded cpu-tiny embedded run (GOLDEN's: run id "e2e", two steps, lock-step) in `workdir`, with the
    overrides `extra` after e2e_overrides: (config, journal, run directory)."""
    from populora.config import load_config
    from tests.e2e.conftest import e2e_overrides

    cfg = load_config(preset="cpu-tiny", overrides=[*e2e_overrides(workdir, echo_model), *extra], env=False)
    return (cfg, *train(cfg, run_id, steps))


def seeded_records(workdir: Path, echo_model: str, run_id: str = "e2e", steps: int = 2,
                   extra: tuple[str, ...] = ()) -> dict:
    cfg, state, _ = seeded_run(workdir, echo_model, steps, run_id, extra)
    return run_records(state, cfg.league_db_url, run_id)


def learning_signal(records: dict) -> dict[int, set[str]]:
    """Per step of a run's records, the roles ("teacher", "student") of which some adapter's update had a learning
    signal: a non-zero mean |advantage|, a non-zero gradient and trained tokens."""
    phases = records["phases"]
    roles = {a: m["role"] for a, m in phases["0/init"]["population"].items()}
    out: dict[int, set[str]] = {}
    for key, update in sorted(phases.items(), key=lambda kv: int(kv[0].split("/")[0])):  # step 10 after step 9
        step, phase = key.split("/")
        if phase != "update":
            continue
        roles.update({a: m["role"] for a, m in update["population"].items()})
        out[int(step)] = {roles[a] for a, st in update["stats"].items()
                          if st["mean_abs_advantage"] > 0 and st["grad_norm"] > 0 and st["tokens"] > 0}
        evolved = phases.get(f"{step}/evolve")
        if evolved:
            roles.update({a: m["role"] for a, m in evolved["population"].items()})
    return out
