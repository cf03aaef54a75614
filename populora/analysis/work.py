"""Useful executed FLOPs (spec 14, revised): the matrix products a phase runs, counted from the shapes the code runs
them at. What a phase's utilisation is measured with; the charged FLOPs of populora/analysis/flops.py (2N, 6N) stay
the budget.

Per token, a decoder layer runs its seven projections (q, k, v, o; gate, up, down: 2 x d_in x d_out FLOPs each) and,
on the modules an adapter targets, its two factors (2 x r x (d_in + d_out)); attention multiplies the token's query by
the keys it sees and their weights by the values (2 x head_dim x context each, per query head). The embedding is a
lookup, not a product; the output head (2 x vocab x hidden) runs only where logits are used.

    prompt pass   every layer for every prompt token, attention at the context each token sees (1 .. P); the head on
                  the last token only (logits_to_keep=1)
    decode step   one token a row: every layer, attention over the row's KV cache (the prompt, the tokens so far and
                  itself); the head on every generated token
    update        forward over prompt + response; backward: activation gradients through the frozen base (a product
                  per base product whose input needs a gradient: about the forward again), no weight gradients for
                  the base, both for the adapter's factors; the head on the scored (response) tokens, forward and
                  backward

Executed but not useful, on their own lines: recomputation (activation checkpointing runs each layer's forward again
in the backward; the chunked log-probabilities run the head's forward again) and padding (rows padded to their
group's longest). A decode step's bytes: every weight read once in the precision it is stored in (the base's
projections in model.base_matmul's, the head, norms and adapters in the model's), plus the KV cache its rows read.
Integers throughout.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Precision:
    """The precision products run and weights are stored in: the base's projections (`base`: bfloat16 under
    model.base_matmul=bfloat16) and everything else, the LM head, the adapters, attention and the KV cache (`model`)."""

    base: str = "float32"
    model: str = "float32"

    def __post_init__(self) -> None:
        for name in (self.base, self.model):
            if name not in ELEMENT_BYTES:
                raise ValueError(f"unknown precision {name!r}; known: {sorted(ELEMENT_BYTES)}")


@dataclass(frozen=True)
class Count:
    """FLOPs of a phase's matrix products: the useful ones by what runs them, and the executed-but-not-useful ones."""

    projections: int = 0  # the base's seven projections per layer
    head: int = 0  # the output head
    adapter: int = 0  # the adapters' A and B factors
    attention: int = 0  # query x keys and weights x values
    recomputed: int = 0  # run again (activation checkpointing, the chunked head's backward): executed, not useful
    padding: int = 0  # on padding tokens: executed, not useful

    @property
    def useful(self) -> int:
        return self.projections + self.head + self.adapter + self.attention

    @property
    def executed(self) -> int:
        return self.useful + self.recomputed + self.padding

    def __add__(self, other: Count) -> Count:
        return Count(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def times(self, k: int) -> Count:
        return Count(*(k * getattr(self, f.name) for f in fields(self)))

    def by_precision(self, precision: Precision) -> dict[str, int]:
        """The useful FLOPs per precision they run in (the base's projections in `precision.base`)."""
        out = {precision.base: self.projections}
        out[precision.model] = out.get(precision.model, 0) + self.head + self.adapter + self.attention
        return out

    def as_json(self) -> dict[str, int]:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "useful": self.useful,
                "executed": self.executed}


def total(counts: Iterable[Count]) -> Count:
    return sum(counts, Count())


def _triangle(first: int, last: int) -> int:
    """first + (first + 1) + ... + last (0 when last < first)."""
    return (first + last) * (last - first + 1) // 2 if last >= first else 0


@dataclass(frozen=True)
class Shapes:
    """A decoder-only transformer's shapes (Llama, Qwen2, Mistral and their kin) and the adapter run on it: rank
    `rank` on the projections named in `targets` (no adapter: rank 0)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool = True  # the head is the embedding: counted once in `parameters`, read once either way
    rank: int = 0
    targets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.targets) - set(PROJECTIONS))
        if unknown:
            raise ValueError(f"adapter targets {unknown} are not projections this counter knows ({PROJECTIONS})")
        if min(self.hidden, self.intermediate, self.layers, self.heads, self.kv_heads, self.head_dim,
               self.vocab) < 1 or self.rank < 0:
            raise ValueError(f"shapes must be positive (rank non-negative): {self}")

    @classmethod
    def of(cls, config, rank: int = 0, targets: Iterable[str] = ()) -> Shapes:
        """From a Hugging Face config (its text part for a multimodal one)."""
        c = config.get_text_config() if hasattr(config, "get_text_config") else config
        heads = c.num_attention_heads
        return cls(hidden=c.hidden_size, intermediate=c.intermediate_size, layers=c.num_hidden_layers, heads=heads,
                   kv_heads=getattr(c, "num_key_value_heads", None) or heads,
                   head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads, vocab=c.vocab_size,
                   tied=bool(getattr(c, "tie_word_embeddings", True)), rank=rank, targets=tuple(targets))

    def projections(self) -> dict[str, tuple[int, int]]:
        """(d_in, d_out) of each projection of one layer."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, i),
                "up_proj": (h, i), "down_proj": (i, h)}

    # ---- parameters
    def projection_params(self) -> int:
        return self.layers * sum(d_in * d_out for d_in, d_out in self.projections().values())

    def head_params(self) -> int:
        return self.vocab * self.hidden

    def norm_params(self) -> int:
        return self.hidden * (2 * self.layers + 1)  # two RMS norms a layer and the final one

    def adapter_params(self, rank: int | None = None) -> int:
        r = self.rank if rank is None else rank
        dims = self.projections()
        return self.layers * r * sum(sum(dims[t]) for t in self.targets)

    def parameters(self) -> int:
        """The base's parameters (biases aside: they are not products): what spec 14's N counts, the embedding in."""
        return self.projection_params() + self.norm_params() + self.head_params() * (1 if self.tied else 2)

    # ---- per token, forward
    def projection_flops(self) -> int:
        return 2 * self.projection_params()

    def adapter_flops(self, rank: int | None = None) -> int:
        return 2 * self.adapter_params(rank)

    def head_flops(self) -> int:
        return 2 * self.head_params()

    def attention_flops(self, contexts: int) -> int:
        """Scores and values of one query per head and layer, summed over the `contexts` keys it sees (or several
        queries' contexts, summed)."""
        return 4 * self.layers * self.heads * self.head_dim * contexts

    # ---- the backward pass's gradient flow through a frozen base
    def _flow(self) -> tuple[dict[str, int], int, bool]:
        """Per projection, the layers whose input needs a gradient (it depends on an adapter's parameters: the
        backward runs the activation-gradient product there); the backward's attention products, in units of one
        forward product (scores or values) summed over the layers; whether the final hidden state needs one."""
        adapted = set(self.targets)
        inputs = dict.fromkeys(PROJECTIONS, 0)
        units = 0
        live = False  # the residual stream depends on adapter parameters
        for _ in range(self.layers):
            q, k, v = (live or name in adapted for name in ("q_proj", "k_proj", "v_proj"))
            for name in ("q_proj", "k_proj", "v_proj"):
                inputs[name] += live
            # d(weights) = dO V^T if the scores need it, dV = A^T dO, dQ = dS K, dK = dS^T Q
            units += (q or k) + v + q + k
            attended = q or k or v
            inputs["o_proj"] += attended
            live = attended or "o_proj" in adapted
            for name in ("gate_proj", "up_proj"):
                inputs[name] += live
            act = live or "gate_proj" in adapted or "up_proj" in adapted
            inputs["down_proj"] += act
            live = act or "down_proj" in adapted
        return inputs, units, live


def prompt_pass(s: Shapes, length: int, rank: int | None = None) -> Count:
    """One prompt of `length` tokens: every layer for each, attention at contexts 1 .. length, the head once."""
    if length < 1:
        return Count()
    return Count(projections=length * s.projection_flops(), head=s.head_flops(),
                 adapter=length * s.adapter_flops(rank), attention=s.attention_flops(_triangle(1, length)))


def prompt_group(s: Shapes, lengths: Sequence[int], ranks: Sequence[int | None] | None = None) -> Count:
    """One pass over prompts left-padded to the longest (each row's adapter of `ranks[i]`; None: the shapes' own):
    each prompt's useful count, and the padding's layers and attention (a padded row runs as a row of the longest
    length) on the padding line."""
    ranks = list(ranks) if ranks is not None else [None] * len(lengths)
    useful = total(prompt_pass(s, n, r) for n, r in zip(lengths, ranks, strict=True))
    width = max(lengths, default=0)
    extra = sum((width - n) * (s.projection_flops() + s.adapter_flops(r)) for n, r in zip(lengths, ranks, strict=True))
    extra += s.attention_flops(sum(_triangle(n + 1, width) for n in lengths))
    return useful + Count(padding=extra)


def decode_step(s: Shapes, contexts: Sequence[int], ranks: Sequence[int | None] | None = None) -> Count:
    """One decode step: one token for each row, row i attending to contexts[i] keys (its prompt, the tokens
    generated before and itself); the head on each row's token."""
    rows = len(contexts)
    adapter = sum(s.adapter_flops(r) for r in ranks) if ranks is not None else rows * s.adapter_flops()
    return Count(projections=rows * s.projection_flops(), head=rows * s.head_flops(), adapter=adapter,
                 attention=s.attention_flops(sum(contexts)))


def decode_bytes(s: Shapes, contexts: Sequence[int], adapter_ranks: Iterable[int], precision: Precision) -> int:
    """Bytes one decode step reads: every weight once (the projections in the base's precision; the head, the norms
    and each adapter of the step, `adapter_ranks` one rank per distinct adapter, in the model's) and the keys and
    values of every row's context."""
    base, model = ELEMENT_BYTES[precision.base], ELEMENT_BYTES[precision.model]
    weights = base * s.projection_params() + model * (s.head_params() + s.norm_params()
                                                      + sum(s.adapter_params(r) for r in adapter_ranks))
    kv = 2 * s.layers * s.kv_heads * s.head_dim * sum(contexts) * model
    return weights + kv


@dataclass(frozen=True)
class Completion:
    """One generated row: its prompt's tokens, the tokens it generated, and its adapter (None: the base) and rank."""

    prompt: int
    generated: int
    adapter: str | None = None
    rank: int | None = None


def decode_steps(s: Shapes, rows: Sequence[Completion], precision: Precision) -> list[tuple[Count, int]]:
    """Each decode step of one batch, its count and bytes: a row's first token comes from the prompt pass, so step
    i (1 .. longest - 1) runs the rows that generate more than i tokens, each at context prompt + i."""
    out = []
    for i in range(1, max((r.generated for r in rows), default=0)):
        live = [r for r in rows if r.generated > i]
        contexts = [r.prompt + i for r in live]
        ranks = [0 if r.adapter is None else s.rank if r.rank is None else r.rank for r in live]
        adapters = {(r.adapter, rank) for r, rank in zip(live, ranks, strict=True) if r.adapter is not None}
        out.append((decode_step(s, contexts, ranks), decode_bytes(s, contexts, [k for _, k in adapters], precision)))
    return out


def update(s: Shapes, rows: Sequence[tuple[int, int]], checkpointing: bool = False, rank: int | None = None,
           width: int = 0) -> Count:
    """One update's pass over `rows` (prompt tokens, response tokens), forward and backward; with `width`, the rows
    are one micro-batch right-padded to it, and the padding's passes go on the padding line.

    Forward: every layer over prompt + response, the head on the response tokens. Backward: per token the
    activation-gradient product of each base projection whose input needs a gradient (`Shapes._flow`), the adapter's
    four (both weight gradients, the gradient through B, and through A where its input needs one), attention's
    backward products, and the head's gradient into the hidden state on the response tokens. Recomputed: the head's
    forward on the response tokens (the chunked log-probabilities' backward), and with `checkpointing` every layer's
    forward."""
    inputs, units, live = s._flow()
    dims = s.projections()
    r = s.rank if rank is None else rank
    base_back = sum(n * 2 * dims[name][0] * dims[name][1] for name, n in inputs.items())
    adapter_back = sum(s.layers * (2 * r * dims[t][0] + 4 * r * dims[t][1]) + inputs[t] * 2 * r * dims[t][0]
                       for t in s.targets)
    per_token_layers = s.projection_flops() + s.adapter_flops(r)
    attention_unit = 2 * s.heads * s.head_dim  # one scores or values product per head, one key, one layer

    def passes(tokens: int, contexts: int) -> tuple[int, int, int, int]:
        """(projections, adapter, attention, recomputed layers) of `tokens` tokens whose contexts sum to
        `contexts`."""
        forward_attention = s.attention_flops(contexts)
        again = tokens * per_token_layers + forward_attention if checkpointing else 0
        return (tokens * (s.projection_flops() + base_back), tokens * (s.adapter_flops(r) + adapter_back),
                forward_attention + units * attention_unit * contexts, again)

    count = Count()
    for prompt, response in rows:
        n = prompt + response
        proj, adapter, attention, again = passes(n, _triangle(1, n))
        head = response * s.head_flops() * (2 if live else 1)
        count = count + Count(projections=proj, adapter=adapter, attention=attention, head=head,
                              recomputed=again + response * s.head_flops())
        if width > n:
            extra = passes(width - n, _triangle(n + 1, width))
            count = count + Count(padding=sum(extra))
    return count
