"""Generation for the phases: every request of a phase in one multi-LoRA Generate call, with a progress bar."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from tqdm import tqdm

from coordinator.run.phases.run import Run
from populora.pb import inference_pb2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Generation:
    prompt_token_ids: list[int]
    completions: list[inference_pb2.Completion]


def generate(run: Run, requests: list[inference_pb2.GenerationRequest], desc: str) -> dict[str, Generation]:
    """Send every request in ONE Generate call; results by request id. A progress bar shows rows and tokens/s."""
    if not requests:
        return {}
    rows = sum(max(1, r.sampling.n) for r in requests)
    out: dict[str, Generation] = {}
    tokens = 0
    start = time.perf_counter()
    bar = tqdm(total=rows, desc=f"{desc:8s}", unit="row", disable=not run.progress, leave=False, dynamic_ncols=True)
    try:
        for res in run.services.inference.Generate(inference_pb2.GenerateRequest(requests=requests)):
            out[res.request_id] = Generation(list(res.prompt_token_ids), list(res.completions))
            tokens += sum(len(c.token_ids) for c in res.completions)
            bar.update(len(res.completions))
            bar.set_postfix_str(f"{tokens / max(time.perf_counter() - start, 1e-9):.1f} tok/s")
    finally:
        bar.close()
    missing = [r.request_id for r in requests if r.request_id not in out]
    if missing:
        raise RuntimeError(f"inference returned no result for {len(missing)} request(s), e.g. {missing[:3]}")
    seconds = time.perf_counter() - start
    log.info("%s: %d rows, %d tokens in %.1fs (%.1f tok/s)", desc, rows, tokens, seconds, tokens / max(seconds, 1e-9))
    return out


def sampling_params(run: Run, n: int, max_new: int, seed: int) -> inference_pb2.SamplingParams:
    g = run.cfg.generation
    return inference_pb2.SamplingParams(temperature=g.temperature, top_p=g.top_p, max_new_tokens=max_new,
                                        seed=seed, n=n, logprobs=run.cfg.loop.max_staleness > 0)  # mu_b: spec 16


def chat_messages(msgs: list[dict[str, str]]) -> list[inference_pb2.ChatMessage]:
    return [inference_pb2.ChatMessage(role=m["role"], content=m["content"]) for m in msgs]
