"""The generation workload of bench.gpu: one step's propose and solve batches of 8 adapters, built by the phases'
own code as bench.inference builds them, under the 7B preset's sampling; the end-of-sequence bias that makes a
random model's rows end early and unevenly; and the bare base decoding the same rows to the same lengths."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import shutil
from contextlib import contextmanager
from pathlib import Path

from bench.inference_workload import N_ADAPTERS

PRESET = "gpu-7b-4t4s"  # the paper's run: temperature 1, top-p 1, 4 samples per task, 6 references per prompt
SANDBOXES = ("auto", "zygote", "subprocess")
CALIBRATION_PROMPTS = 8


def sandbox_backend(choice: str) -> tuple[str, str]:
    """The sandbox backend that computes the seed tasks' outputs, and why it was chosen. `auto` is the jailed
    `zygote` where bubblewrap and the seccomp binding are there, else `subprocess` (no jail: the programs it runs
    are the warm start's own templates, never model-written, and their outputs, so the batches, are the same)."""
    if choice != "auto":
        return choice, "asked for with --sandbox"
    if shutil.which("bwrap") is None:
        return "subprocess", "no bwrap (bubblewrap) on PATH"
    if importlib.util.find_spec("pyseccomp") is None:
        return "subprocess", "no pyseccomp module"
    return "zygote", "bwrap and pyseccomp found"


def build_batches(store, refs: list, proposals: int, new_tokens: int, sandbox: str, workdir: Path,
                  seed_programs: int = 0):
    """(batches, cfg): the propose and the solve batch of one step as the phases build them (bench.inference's
    make_workload and phase_batches): every adapter teaches every task type `proposals` times, each match's student
    is drawn from all 8 with weights 1/(k+1) (uneven rows per adapter), buffers of warm-start seed tasks whose
    outputs the sandbox service computed (`seed_programs` per task type, 0 = the preset's), a seeded share of
    proposals valid; the PRESET's prompts and sampling, both token budgets capped at `new_tokens`."""
    from bench.inference_workload import (
        Shape,
        bench_config,
        make_workload,
        open_run,
        phase_batches,
        seed_tasks,
    )

    extra = [f"tasks.proposals_per_teacher={proposals}", f"sandbox.backend={sandbox}"]
    if seed_programs:
        extra.append(f"warmstart.programs={seed_programs}")
    cfg = bench_config(None, workdir, new_tokens, preset=PRESET, extra=tuple(extra))
    run, services = open_run(cfg, store, None)
    try:
        players = Shape(tuple(range(N_ADAPTERS)), tuple(range(N_ADAPTERS)), proposals)
        plan = make_workload(run, "gpu", players, [r.adapter_id for r in refs], seed_tasks(run))
        return phase_batches(run, plan), cfg
    finally:
        services.close()


def eos_bias(base, requests: list, temperature: float, mean_tokens: int) -> float:
    """The logit to add to `<|im_end|>` so that a row of the random model ends after about `mean_tokens` tokens.

    A random model puts about 1/V of its mass on each token, so with end-of-sequence honoured no row would ever end
    early; a trained model's rows do, unevenly, and that is what the multi-LoRA layer must handle (finished rows
    leave the batch, the live adapters' segments change). At temperature T a token is drawn from softmax(l / T), so
    P(eos) = p where (l_eos + b) / T = log(p / (1 - p)) + logsumexp_{v != eos}(l_v / T), i.e.

        b = T (log(p / (1 - p)) + logsumexp_{v != eos}(l_v / T)) - l_eos,    p = 1 / mean_tokens,

    from the base's last logits l on the first CALIBRATION_PROMPTS prompts, averaged. Lengths are then about
    geometric with that mean, cut at the budget. 0 for greedy decoding (no bias can end greedy rows at random)."""
    import torch

    from services.inference.backend import encode_prompt

    if temperature <= 0:
        return 0.0
    eos = im_end(base)
    p = 1.0 / mean_tokens
    device = next(base.model.parameters()).device
    biases = []
    with torch.inference_mode():
        for request in requests[:CALIBRATION_PROMPTS]:
            ids = torch.tensor([encode_prompt(base.tokenizer, request)], device=device)
            logits = base.model(input_ids=ids, logits_to_keep=1).logits[0, -1].float()  # (V,)
            rest = torch.cat([logits[:eos], logits[eos + 1:]])
            lse = float(torch.logsumexp(rest / temperature, dim=0))
            biases.append(temperature * (math.log(p / (1 - p)) + lse) - float(logits[eos]))
    return sum(biases) / len(biases)


def im_end(base) -> int:
    return base.tokenizer.convert_tokens_to_ids("<|im_end|>")


@contextmanager
def eos_biased(base, bias: float):
    """The base's output layer with `bias` added to the `<|im_end|>` logit, removed on leaving."""
    import torch

    head = base.model.get_output_embeddings()
    if head.bias is not None:
        raise ValueError("the output layer already has a bias; the end-of-sequence bias assumes none")
    weight = head.weight
    vector = torch.zeros(weight.shape[0], dtype=weight.dtype, device=weight.device)
    vector[im_end(base)] = bias
    head.bias = torch.nn.Parameter(vector, requires_grad=False)
    try:
        yield
    finally:
        head.bias = None


def decode_forced(backend, requests: list, lengths: dict) -> int:
    """The tokens the bare base decodes when every row of `requests` runs to exactly lengths[(request id, completion
    index)] tokens, end-of-sequence ignored: the rows of an adapter run, with the same prompts (encoded as
    HfBackend.generate encodes them, a request's prompt run once for its n rows), per-row seeds and logprobs,
    through the same decoding loop (services.inference.decoder), so both sides decode the same rows for the same
    number of steps and drop them from the batch at the same steps. One Sampling serves all n rows of a request in
    HfBackend.generate, so forced per-row lengths go to the loop directly."""
    import torch

    from services.inference.backend import encode_prompt
    from services.inference.sampling import Row

    rows = []
    for i, request in enumerate(requests):
        ids = encode_prompt(backend.base.tokenizer, request, backend.chat_template)
        for k in range(request.sampling.n):
            sampling = dataclasses.replace(request.sampling, max_new_tokens=lengths[(request.request_id, k)],
                                           ignore_eos=True)
            gen = torch.Generator().manual_seed(int(sampling.seed) + k) if sampling.temperature > 0 else None
            rows.append(Row(i, k, None, ids, sampling, gen))
    return sum(len(row.token_ids) for row in backend.decoder.run(rows))


def rows_per_adapter(batches: list[list], refs: list) -> list[int]:
    """Rows (requests x n) of each adapter over the batches, in the order of `refs`."""
    rows = {r.key: 0 for r in refs}
    for request in (r for batch in batches for r in batch):
        rows[request.adapter.key] += request.sampling.n
    return [rows[r.key] for r in refs]
