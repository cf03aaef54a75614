import pytest
import torch

from populora.models import ModelError, list_models, load_base_model, resolve_model_dir


def test_tiny_loads_and_generates(tiny):
    tok = tiny.tokenizer
    assert tok.convert_tokens_to_ids("<|endoftext|>") == 151643
    assert tok.convert_tokens_to_ids("<|im_end|>") == 151645
    prompt = tok.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False,
                                     add_generation_prompt=True)
    enc = tok([prompt], return_tensors="pt")
    out = tiny.model.generate(**enc, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == enc["input_ids"].shape[1] + 4
    assert all(not p.requires_grad for p in tiny.model.parameters())


def test_tiny_is_deterministic(tiny):
    again = load_base_model("tiny")
    for (n1, p1), (n2, p2) in zip(tiny.model.named_parameters(), again.model.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2)


@pytest.mark.parametrize("text", [
    "def f(a, b):\n    return sorted(a)[::-1] + [b ** 2 for _ in range(3)]\n",
    "x = {'k': (1, 2.5, -3e4)}\t# naïve ünïcode 中文 \\n\n",
    "<think>reason</think>\n<answer>f('Lab', 'retest')</answer>",
])
def test_tokenizer_roundtrip(tiny, text):
    ids = tiny.tokenizer(text)["input_ids"]
    assert tiny.tokenizer.decode(ids) == text


@pytest.mark.slow
def test_smollm2_greedy():
    bm = load_base_model("smollm2-135m")
    tok = bm.tokenizer
    prompt = tok.apply_chat_template([{"role": "user", "content": "Write a Python function that adds two numbers."}],
                                     tokenize=False, add_generation_prompt=True)
    enc = tok([prompt], return_tensors="pt")
    out = bm.model.generate(**enc, max_new_tokens=12, do_sample=False)
    text = tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "def" in text or "python" in text.lower(), text
    assert bm.model.config.num_hidden_layers == 30


def test_missing_model_is_clear(tmp_path):
    with pytest.raises(ModelError, match="never downloaded"):
        resolve_model_dir("Qwen/Qwen2.5-Coder-7B")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="config.json"):
        resolve_model_dir(str(tmp_path / "empty"))


def test_local_directory(tiny):
    bm = load_base_model(str(tiny.path))
    assert bm.model.config.hidden_size == 64


def test_list_models():
    names = [m.name for m in list_models()]
    assert names[:2] == ["tiny", "smollm2-135m"]


def test_free_cores_sees_other_processes_busy():
    import multiprocessing as mp
    import os

    from populora.models import free_cores

    cores = os.cpu_count() or 1
    assert 1 <= free_cores() <= cores
    ctx = mp.get_context("spawn")
    spinners = [ctx.Process(target=_spin, args=(3.0,), daemon=True) for _ in range(cores)]
    for p in spinners:
        p.start()
    try:
        import time

        time.sleep(0.5)  # started and spinning
        assert free_cores(window_s=0.3) == 1  # every core taken by another process
    finally:
        for p in spinners:
            p.terminate()
            p.join()


def test_a_process_pinned_to_one_core_gets_one_thread_however_idle_the_rest_is():
    """A replica pinned to a core (taskset, a cpuset, bench.scale/bench.pipeline) must not run two torch threads on
    it: they would wait on each other at every barrier."""
    import os
    import subprocess
    import sys

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: every process here is pinned to it")
    # the machine claims 64 cores: counted by the machine instead of the affinity set, the answer would be ~60
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); os.cpu_count = lambda: 64; "
            "from populora.models import free_cores, allowed_cpus; print(len(allowed_cpus()), free_cores(0.3))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["1", "1"]


def _spin(seconds: float) -> None:
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_free_cores_falls_back_to_the_load_average(monkeypatch):
    import os

    import populora.models as models

    def unreadable(cpus=None):
        raise OSError("no /proc/stat")

    monkeypatch.setattr(models, "_busy_cpu_seconds", unreadable)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert models.free_cores() == len(models.allowed_cpus())
    monkeypatch.setattr(os, "getloadavg", lambda: (50.0, 0.0, 0.0))
    assert models.free_cores() == 1


def test_torch_threads_auto_holds_the_free_cores_then_restores(monkeypatch):
    import torch

    import populora.models as models

    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    monkeypatch.setattr(models, "free_cores", lambda window_s=0.1: target)
    with models.torch_threads(-1):
        assert torch.get_num_threads() == target
    assert torch.get_num_threads() == before
    with models.torch_threads(0):
        assert torch.get_num_threads() == before
