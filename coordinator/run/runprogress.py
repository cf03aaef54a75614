"""Where a run stands, recorded in the league for its dashboard: the run's status (RecordRun) and the persisted phases
of its steps (RecordPhases), copied from the coordinator's journal.

The journal stays the record: a phase is stored there once, as before, and only then sent; the league gets each
row's step, phase, seconds, attempts and finish time (a phase that failed for good, its error), never a result.
Each phase is sent as soon as it is stored (`stored`, for the live view; a league that does not answer costs the
view a phase, not the run), and every phase of a step again when the step ends (`step`, beside the step's summary),
so a resumed run, or one recorded before the league kept progress, records all it reads back. The league replaces
what it holds under the same (run, step, phase): a replay never duplicates.
"""

from __future__ import annotations

import logging

from coordinator.run.journal import JournalDB, failed_key
from populora.pb import league_pb2

log = logging.getLogger(__name__)
FAILED = failed_key("")
MAX_ERROR_CHARS = 2000  # the league's limit on an error's length (services/league/checks.py)


class RunProgress:
    """Sends one run's status and phase rows from `db` (the journal) to `league` (a LeagueService or its client)."""

    def __init__(self, league, db: JournalDB, run_id: str):
        self.league, self.db, self.run_id = league, db, run_id

    def status(self, status: str) -> None:
        """Set the run's status in the journal, then in the league with the mode and config the journal holds (the
        league's copy is best effort: the run's outcome does not depend on it)."""
        self.db.set_status(self.run_id, status)
        stored = self.db.get_run(self.run_id) or {}
        self._best_effort(lambda: self.league.RecordRun(league_pb2.RecordRunRequest(
            run_id=self.run_id, mode=stored.get("mode", ""), config_yaml=stored.get("config_yaml", ""),
            status=status)), f"status {status}")

    def step(self, step: int) -> None:
        """Send every phase the journal holds of `step`."""
        rows = self.db.phase_rows(self.run_id, step)
        done = {r["phase"] for r in rows}  # a phase stored and also failed (a late delivery) is sent as stored
        phases = [self._phase(r) for r in rows
                  if not (r["phase"].startswith(FAILED) and r["phase"][len(FAILED):] in done)]
        self.league.RecordPhases(league_pb2.RecordPhasesRequest(run_id=self.run_id, phases=phases))

    def stored(self, step: int) -> None:
        """A phase of `step` was just stored, or failed for good: send the step's phases, best effort."""
        self._best_effort(lambda: self.step(step), f"the phases of step {step}")

    def _phase(self, row: dict) -> league_pb2.PhaseProgress:
        phase, failed = row["phase"], row["phase"].startswith(FAILED)
        error = ""
        if failed:
            phase = phase[len(FAILED):]
            error = str((self.db.get(self.run_id, row["step"], row["phase"]) or {}).get("error", ""))
        return league_pb2.PhaseProgress(step=row["step"], phase=phase, seconds=row["seconds"],
                                        attempts=row["attempts"], finished_at=row["finished_at"], failed=failed,
                                        error=error[:MAX_ERROR_CHARS])

    def _best_effort(self, send, what: str) -> None:
        try:
            send()
        except Exception as e:  # noqa: BLE001 - the dashboard's copy; the journal holds the record
            log.warning("could not record %s of run %s in the league (the dashboard shows it once the step ends "
                        "or the run is resumed): %s", what, self.run_id, e)
