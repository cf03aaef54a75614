"""Long scoring shows its progress: generation reports answers as the inference stream returns them (one batch, not
cut into parts), sandbox scoring reports jobs as they come back, each stage in about 16 lines (or one every 30 s)
saying what is done, the rate and the time left, and `populora eval` prints them."""

from __future__ import annotations

import argparse

from coordinator.experiment.evaluate import _printer
from populora.evals import progress as progress_module
from populora.evals.harness import generate
from populora.evals.progress import Pace, progress_text
from populora.pb import inference_pb2


def test_a_stage_reports_about_sixteen_times_and_never_its_last_item(monkeypatch):
    monkeypatch.setattr(progress_module, "MIN_GAP_S", 0.0)
    seen = []
    pace = Pace(lambda event, info: seen.append((event, info["done"], info["total"])), "generating")
    for done in range(1, 401):
        pace(done, 400)
    assert 15 <= len(seen) <= 16 and {e for e, _, _ in seen} == {"generating"}
    assert [d for _, d, _ in seen] == sorted({d for _, d, _ in seen}) and seen[-1][1] < 400


def test_answers_that_finish_together_make_no_burst_of_lines():
    seen = []
    pace = Pace(lambda event, info: seen.append(info["done"]), "generating")
    for done in range(40):
        pace(done, 40)
    assert seen == [0]  # the start, then all within MIN_GAP_S: the stage's summary line says the rest


def test_a_slow_stage_reports_at_least_every_interval(monkeypatch):
    monkeypatch.setattr(progress_module, "EVERY_S", 0.0)
    seen = []
    pace = Pace(lambda event, info: seen.append(info["done"]), "scoring")
    for done in range(1, 6):
        pace(done, 1000)
    assert seen == [1, 2, 3, 4, 5]


def test_the_line_says_what_is_done_the_rate_and_the_time_left():
    line = progress_text("generating", {"done": 120, "total": 400, "seconds": 40.0})
    assert line == "generating: 120/400 answers, 3.0/s, 40 s so far, about 93 s left"
    scoring = progress_text("scoring", {"done": 50, "total": 100, "seconds": 10.0})
    assert scoring.startswith("scoring: 50/100 sandbox jobs")
    start = progress_text("generating", {"done": 0, "total": 400, "seconds": 0.0})
    assert start == "generating: 0/400 answers, 0 s so far"  # no rate or time left before a twentieth is done
    assert progress_text("generated", {"rows": 4, "tokens": 9, "seconds": 1.0}) == ""


class StreamingInference:
    """Answers each request as the real backends stream them: one result at a time, in the order they finish."""

    def __init__(self):
        self.calls = 0

    def ListAdapters(self, request):
        return inference_pb2.ListAdaptersResponse(max_batch=64, max_resident=8)

    def Generate(self, request):
        self.calls += 1
        for r in reversed(request.requests):
            yield inference_pb2.GenerateResult(request_id=r.request_id, completions=[
                inference_pb2.Completion(index=k, text=f"{r.request_id}:{k}", token_ids=[1, 2])
                for k in range(max(1, r.sampling.n))])


def test_generation_reports_answers_as_the_one_batch_streams_back():
    inference = StreamingInference()
    services = argparse.Namespace(inference=inference)
    requests = [inference_pb2.GenerationRequest(request_id=str(k), sampling=inference_pb2.SamplingParams(n=2))
                for k in range(3)]
    calls = []
    texts, tokens = generate(services, requests, progress=lambda done, total: calls.append((done, total)))
    assert inference.calls == 1  # progress does not cut the batch into parts
    assert calls == [(0, 6), (2, 6), (4, 6), (6, 6)] and tokens == 12 and texts["0"] == ["0:0", "0:1"]


def test_populora_eval_prints_each_stage_line(capsys):
    printer = _printer(argparse.Namespace())
    printer("scoring", {"done": 3, "total": 12, "seconds": 1.5})
    printer("generated", {"rows": 8, "tokens": 100, "seconds": 2.0})
    err = capsys.readouterr().err.splitlines()
    assert err == ["scoring: 3/12 sandbox jobs, 2.0/s, 2 s so far, about 4 s left",
                   "generated 8 answers (100 tokens) in 2.0 s"]
