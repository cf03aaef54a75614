"""Real answers of SmolLM2-135M-Instruct (the `cpu-smol` model) to benchmark prompts, kept as test data so the
program extraction is tested on what the model really writes. Regenerate (about a minute on 2 cores):

    PYTHONPATH=$PWD python -m tests.evals.smollm2_outputs

Writes tests/evals/data/smollm2_outputs.json: for the first HumanEval problems, the chat answer (chat template)
and the raw completion (completion mode, HumanEval's stop sequences), greedy, 160 new tokens at most; and, for the
tests' own rows in CRUXEval's release layout (tests/evals/own_rows.py), the bare model's answers under the benchmark
protocol (few-shot, cut at [/ANSWER]) for output and input prediction (modes cruxeval-o, cruxeval-i). Only the
answers are kept, by problem id and mode.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tests.evals.own_rows import CRUXEVAL_LAYOUT_ROWS, write_jsonl

OUT = Path(__file__).with_name("data") / "smollm2_outputs.json"
PROBLEMS = 6
MAX_NEW_TOKENS = 160


def main() -> None:
    from populora.config import load_config
    from populora.evals.benchmarks import load_problems
    from populora.evals.harness import EvalTarget, _request
    from populora.pb import inference_pb2
    from services.inference.service import InferenceService

    cfg = load_config(preset="cpu-smol", env=False)
    inference = InferenceService.from_config(cfg)
    problems = load_problems("humaneval", limit=PROBLEMS)
    base = EvalTarget("base", None)
    requests = [_request(p, base, f"{mode}/{p.id}", mode, 1, 0.0, MAX_NEW_TOKENS, 0)
                for mode in ("chat", "completion") for p in problems]
    with tempfile.TemporaryDirectory() as tmp:
        rows = write_jsonl(Path(tmp) / "rows.jsonl", CRUXEVAL_LAYOUT_ROWS)
        crux = {name: [p for p in load_problems(name, rows) if not p.set_apart]
                for name in ("cruxeval-o", "cruxeval-i")}
    requests += [_request(p, base, f"{name}/{p.id}", "cruxeval", 1, 0.0, MAX_NEW_TOKENS, 0)
                 for name, ps in crux.items() for p in ps]
    texts = {r.request_id: r.completions[0].text
             for r in inference.Generate(inference_pb2.GenerateRequest(requests=requests))}
    rows = [{"problem": p.id, "mode": mode, "text": texts[f"{mode}/{p.id}"]}
            for mode in ("chat", "completion") for p in problems]
    rows += [{"problem": p.id, "mode": name, "text": texts[f"{name}/{p.id}"]} for name, ps in crux.items() for p in ps]
    OUT.write_text(json.dumps({"model": cfg.model.name, "max_new_tokens": MAX_NEW_TOKENS, "answers": rows},
                              indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
