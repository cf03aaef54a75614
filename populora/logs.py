"""The one logging setup: human-readable lines on a terminal, JSON lines (with run and step ids) in services."""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import time

run_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("run_id", default="")
step_var: contextvars.ContextVar[int | None] = contextvars.ContextVar("step", default=None)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        run, step = run_id_var.get(), step_var.get()
        if run:
            out["run_id"] = run
        if step is not None:
            out["step"] = step
        for key in ("service", "phase", "adapter_id"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(level: str | None = None, json_lines: bool | None = None, tag: str = "") -> None:
    """Configure the root logger once. JSON when POPULORA_LOG_JSON=1 or when asked (services do). `tag` goes before
    every plain-text line (e.g. `[seed 2]` for one of the processes of `populora experiment --jobs`)."""
    level = level or os.environ.get("POPULORA_LOG_LEVEL", "INFO")
    if json_lines is None:
        json_lines = os.environ.get("POPULORA_LOG_JSON", "") == "1"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else
                         logging.Formatter(f"%(asctime)s {tag + ' ' if tag else ''}%(levelname).1s %(name)s: "
                                           "%(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "urllib3", "transformers", "peft", "alembic", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
