"""The recording of a run: per-step metrics, timeline, efficiency, the report and its figures."""
