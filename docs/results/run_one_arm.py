"""How the two arms of docs/results were trained side by side: one arm of the smol-exp1 experiment through
coordinator.experiment.run_arm, the code path `populora experiment` runs each arm with. `python run_one_arm.py 0` is
the population, `1` the baseline; afterwards the same `populora experiment` command skips both (finished) and scores
and reports them."""
import sys

from coordinator.cli import build_parser, load_cli_config
from coordinator.experiment import plan, run_arm
from coordinator.journal import JournalDB
from coordinator.train import _apply_limits
from populora.logs import setup_logging

setup_logging()
args = build_parser().parse_args(["experiment", "--preset", "cpu-smol-experiment", "--budget", "tokens=70000",
                                  "--seeds", "1", "--limit", "24", "--id", "smol-exp1"])
cfg = load_cli_config(args)
_apply_limits(args, cfg)
cfg.run.run_id = ""
exp = plan(cfg, "smol-exp1", [1], [], 24, 1)
arm = exp.arms[int(sys.argv[1])]
db = JournalDB(exp.cfg.league_db_url)
print("running", arm.run_id, flush=True)
run_arm(db, arm)
print("done", arm.run_id, flush=True)
