"""A seed reproduces its run: two runs of one seed and run id on this machine, with the settings under which two
such runs once differed (a warm start the first run fits and the second finds cached, sandbox jobs whose CPU time
the kernel counts, thread counts of -1 that follow the machine's load, here made with run.reproducible), store the
same records bit for bit and the same weights in every stored adapter version, embedded and distributed."""

import hashlib
import itertools
import subprocess
from pathlib import Path

from coordinator.distributed import LocalCluster
from coordinator.run.journal import JournalDB
from populora import models
from populora.config import load_config
from populora.reproduce import differences
from tests.conftest import pg_schema
from tests.e2e.conftest import e2e_overrides
from tests.e2e.echo_model import E2E_LR
from tests.e2e.records import run_records, train

RUN_ID = "repro"
STEPS = 1  # step 0 (warm start, seeding) and one step: the sandbox's CPU time is in both


def _settings(warm_cache: Path) -> list[str]:
    """The settings two runs once differed under; the warm start small (and at the echo model's learning rate, so
    its proposals stay valid), cached where both runs find it."""
    return ["warmstart.enabled=true", "warmstart.programs=3", "warmstart.steps=2", f"warmstart.lr={E2E_LR}",
            f"warmstart.cache_dir={warm_cache}", "generation.threads=-1", "trainer.threads=-1",
            "run.reproducible=true"]


def stored_weights(store_root: Path) -> dict[str, str]:
    """The SHA-256 of the weights file of every adapter version in a store, by "<adapter id>/v<N>"."""
    root = Path(store_root) / "adapters"
    return {str(f.parent.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(root.glob("*/v*/adapter_model.safetensors"))}


def _same(first: tuple[dict, dict], second: tuple[dict, dict]) -> None:
    """Two runs' (records, stored weights) agree, floats bit for bit."""
    (records, weights), (again, weights_again) = first, second
    assert weights and weights == weights_again, differences(weights, weights_again)
    assert not (diff := differences(records, again, rel_tol=0, abs_tol=0)), "\n".join(diff)


def test_a_seed_reproduces_its_run_embedded(tmp_path, echo_model, monkeypatch):
    # the machine's load changes between batches: -1 would decode and train on 2 cores, then 1, then 2, ...
    load = itertools.cycle([2, 1])
    monkeypatch.setattr(models, "free_cores", lambda window_s=0.1: next(load))
    runs, raw = [], []
    for name in ("first", "second"):
        cfg = load_config(preset="cpu-tiny", env=False,
                          overrides=[*e2e_overrides(tmp_path / name, echo_model), *_settings(tmp_path / "warm")])
        state, _ = train(cfg, RUN_ID, STEPS)
        assert (cfg.generation.threads, cfg.trainer.threads) == (1, 1)  # what run.reproducible made of -1
        runs.append((run_records(state, cfg.league_db_url, RUN_ID), stored_weights(cfg.store_root)))
        raw.append(state.get(RUN_ID, 0, "warmstart"))
    # what the records leave out did differ: the first run fitted the warm start, the second found it
    assert (raw[0]["cached"], raw[1]["cached"]) == (False, True)
    _same(*runs)


def test_a_seed_reproduces_its_run_distributed(tmp_path, echo_model, pg_url, redis_url):
    url, prefix = redis_url
    runs, raw = [], []
    with pg_schema() as second_url:
        for name, db_url in (("first", pg_url), ("second", second_url)):
            work = tmp_path / name
            over = [o for o in e2e_overrides(work, echo_model) if not o.startswith("league.db_url")]
            cluster = LocalCluster(work, "cpu-tiny", [*over, f"queue.stream_prefix={prefix}{name}",
                                                      "sandbox.workers=1", *_settings(tmp_path / "warm")],
                                   db_url=db_url, redis_url=url)
            try:
                cluster.start()
                rc = subprocess.call(cluster.train_command(RUN_ID, STEPS, "--no-report"), env=cluster.env(),
                                     stdout=open(cluster.logs / "train.log", "wb"), stderr=subprocess.STDOUT)
                assert rc == 0, (cluster.logs / "train.log").read_text()[-3000:]
            finally:
                cluster.stop()
            state = JournalDB(db_url)
            runs.append((run_records(state, db_url, RUN_ID), stored_weights(cluster.cfg.store_root)))
            raw.append(state.get(RUN_ID, 0, "warmstart"))
            state.close()
    assert (raw[0]["cached"], raw[1]["cached"]) == (False, True)
    _same(*runs)
