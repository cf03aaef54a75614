"""What a Compose run left in the shared volume, read inside a one-off container of the project image (the volume
mounted read-only at /data, no network): the steps and final population the coordinator recorded in the run's
metrics.jsonl, and each named adapter's latest version loaded onto the base model by PEFT itself. Prints one JSON object.

    python - RUN_ID MODEL ADAPTER_ID... < scripts/compose_volume_check.py
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

DATA = Path("/data")


def run_record(run_id: str) -> tuple[int, list[str]]:
    """(training steps in the run's metrics.jsonl, the adapter ids of the population after its last step); step 0
    is the seeding, not a training step."""
    path = DATA / "runs" / run_id / "metrics.jsonl"
    if not path.exists():
        return 0, []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    steps = [r for r in rows if r.get("step", 0) >= 1]
    return len({r["step"] for r in steps}), sorted(steps[-1].get("population", {})) if steps else []


def latest_version(adapter_id: str) -> Path | None:
    root = DATA / "store" / "adapters" / adapter_id
    versions = [(int(m.group(1)), p) for p in root.glob("v*") if (m := re.fullmatch(r"v(\d+)", p.name))]
    return max(versions)[1] if versions else None


def main(argv: list[str]) -> int:
    run_id, model, adapters = argv[0], argv[1], argv[2:]
    from peft import PeftModel

    from populora.models import load_base_model

    base = load_base_model(model).model
    found: dict[str, dict] = {}
    for adapter_id in adapters:
        path = latest_version(adapter_id)
        if path is None:
            found[adapter_id] = {"peft": False, "error": "no version in /data/store"}
            continue
        try:
            peft_model = PeftModel.from_pretrained(copy.deepcopy(base), str(path))
            lora = [n for n, _ in peft_model.named_parameters() if "lora_A" in n or "lora_B" in n]
            found[adapter_id] = {"peft": bool(lora), "version": path.name, "lora_tensors": len(lora),
                                 "error": "" if lora else "PEFT loaded no LoRA tensors"}
        except Exception as e:  # noqa: BLE001 - every failure is reported, per adapter
            found[adapter_id] = {"peft": False, "version": path.name, "error": f"{type(e).__name__}: {e}"[:300]}
    steps, population = run_record(run_id)
    print(json.dumps({"steps_done": steps, "population": population, "adapters": found}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
