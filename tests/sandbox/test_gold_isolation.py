"""Gold never meets model code, as a property: no job the verifier builds carries a gold value; a program that
reaches everything it can in its process and rewrites it is still judged `wrong`, with the static rules
bypassed (so this tests the construction, not the blocklist); and the process jobs are forked from holds nothing
of earlier jobs."""

from __future__ import annotations

import pytest

from populora.config import TasksConfig
from populora.tasks import Attempt, JobResult, Proposal, Triplet, check_answers, validate_proposals
from populora.tasks.jobs import Job
from tests.sandbox.reward_hack_corpus import TASK_F, static_rules_bypassed

SETTINGS = TasksConfig(timeout_s=3.0)

# Walks every frame, traceback, generator, coroutine, async generator and closure it can reach, through every
# reflective door of the standard library it knows (sys, gc, inspect, traceback, operator, functools, types,
# weakref, copyreg and pickle's __reduce__ protocol, exceptions' __traceback__), and rewrites every mutable object
# it finds so that whatever could hold an expected value says what this program returns (-1): lists and dicts
# of strings, frame locals (written back into the running frames), closure cells, function defaults. Against
# the verifier that evaluated gold in the job, this program was judged correct.
WALKER = r'''
import copy, copyreg, ctypes, functools, gc, inspect, operator, os, pickle, sys, traceback, types, weakref

TARGET = '-1'
SEEN = set()
FOUND = []
CALLS = [0]


class Walker:
    @staticmethod
    def rewrite(obj, depth=0):
        if depth > 3 or id(obj) in SEEN:
            return
        SEEN.add(id(obj))
        if type(obj) is list:
            if obj and all(type(s) is str for s in obj):
                if len(obj) == 5 and all(s.strip('-').isdigit() for s in obj):
                    FOUND.append(list(obj))
                obj[:] = [TARGET] * len(obj)
            for item in list(obj):
                Walker.rewrite(item, depth + 1)
        elif type(obj) is dict:
            for key, value in list(obj.items()):
                if key in ('literals', 'gold', 'outputs', 'expected') and type(value) is list:
                    obj[key] = [TARGET] * max(len(value), 5)
                Walker.rewrite(value, depth + 1)
        elif type(obj) is types.FrameType:
            Walker.rewrite(obj.f_locals, depth + 1)
            try:
                ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(obj), ctypes.c_int(0))
            except Exception:
                pass
        elif type(obj) is types.FunctionType:
            for cell in obj.__closure__ or ():
                try:
                    Walker.rewrite(cell.cell_contents, depth + 1)
                except ValueError:
                    pass
            Walker.rewrite(list(obj.__defaults__ or ()), depth + 1)
            Walker.rewrite(obj.__kwdefaults__ or {}, depth + 1)
        elif type(obj) in (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType):
            frame = (getattr(obj, 'gi_frame', None) or getattr(obj, 'cr_frame', None)
                     or getattr(obj, 'ag_frame', None))
            if frame is not None:
                Walker.rewrite(frame, depth + 1)

    @staticmethod
    def frames():
        frames = []
        frame = sys._getframe()
        while frame is not None:
            frames.append(frame)
            frame = operator.attrgetter('f_back')(frame)
        frames += [info.frame for info in inspect.stack(0)]
        try:
            raise RuntimeError
        except RuntimeError as e:
            frames += [f for f, _ in traceback.walk_tb(e.__traceback__)]
            frames += [f for f, _ in traceback.walk_stack(e.__traceback__.tb_frame)]
        holder = []
        gen = (operator.attrgetter('gi_frame.f_back')(holder[0]) for _ in [0])
        holder.append(gen)
        frames.append(next(gen))

        async def coro():
            return sys._getframe().f_back

        try:
            coro().send(None)
        except StopIteration as stop:
            frames.append(stop.value)
        frames += [o for o in gc.get_objects() if type(o) is types.FrameType]
        return [f for f in frames if f is not None]

    @staticmethod
    def walk(*_):
        for frame in Walker.frames():
            Walker.rewrite(frame)
            Walker.rewrite(frame.f_globals)
        for obj in gc.get_objects():
            if type(obj) in (dict, list, types.FunctionType, types.GeneratorType, types.CoroutineType,
                             types.AsyncGeneratorType):
                Walker.rewrite(obj)
        for module in list(sys.modules.values()):
            Walker.rewrite(getattr(module, '__dict__', {}))

    def __reduce__(self):
        Walker.walk()
        return (int, ())

    @staticmethod
    def report():
        frames = Walker.frames()
        nonce = any(type(fr.f_locals.get('nonce')) is bytes for fr in frames)
        job = any(type(fr.f_locals.get('job')) is dict for fr in frames)
        print('reached', len(frames), 'frames; job message', job, '; nonce', nonce, flush=True)


copyreg.pickle(types.SimpleNamespace, lambda ns: (Walker.walk(), (types.SimpleNamespace, ()))[1])


def f(x):
    CALLS[0] += 1
    if CALLS[0] == 1:
        Walker.report()
    token = type('Token', (), {})()
    weakref.finalize(token, Walker.walk)
    pickle.dumps(Walker())
    copy.copy(types.SimpleNamespace())
    functools.reduce(lambda a, b: Walker.walk() or a, [0, 1], 0)
    Walker.walk()
    return -1
'''


def _walker_attempt(aid: str = "walker") -> Attempt:
    return Attempt(aid, TASK_F, f"<think>t</think><answer>```python\n{WALKER}\n```</answer>")


def test_the_walker_is_wrong_with_the_static_rules_bypassed(zygote):
    with static_rules_bypassed():
        [c] = check_answers([_walker_attempt()], SETTINGS, zygote.run)
    assert c.outcome == "wrong", c.detail


def test_the_walker_reaches_what_it_claims(zygote):
    """The walker does run its reflection in the job (it is not refused early) and reaches the job's own frame,
    its message and its nonce; what it rewrites changes only its own values."""
    [r] = zygote.run([Job("w", WALKER, calls=[f"f({i})" for i in range(5, 10)], timeout_s=3.0)])
    assert r.status == "ok" and set(r.values) == {-1}, (r.status, r.error, r.stdout[-500:])
    reached = r.stdout.split()
    assert int(reached[1]) >= 5 and "job message True ; nonce True" in r.stdout, r.stdout


def _recording_runner(seen: list[Job]):
    def run(jobs: list[Job]) -> list[JobResult]:
        seen.extend(jobs)
        return [JobResult(j.job_id, "ok", values=[0] * (len(j.calls) + len(j.literals)),
                          reprs=["0"] * (len(j.calls) + len(j.literals))) for j in jobs]

    return run


def test_no_job_carries_a_gold_value():
    """Every job check_answers builds, for every task type, holds only model-written text: no gold output's
    text appears in any program, call or literal."""
    gold = [f"'GOLD-{k}-7f3a'" for k in range(10)]
    tasks = [Triplet("code_o", "def f(a):\n    return a", ["1"], gold[:1]),
             Triplet("code_i", "def f(a):\n    return a", ["1"], gold[:1]),
             Triplet("code_f", "def f(a):\n    return a", [str(k) for k in range(10)], gold, message="m")]
    answers = ["'x'", "'y'", "```python\ndef f(a):\n    return a\n```"]
    seen: list[Job] = []
    for restricted in (True, False):
        settings = TasksConfig(timeout_s=1.0, restricted_expressions=restricted)
        attempts = [Attempt(f"a{k}", t, f"<think>t</think><answer>{ans}</answer>")
                    for k, (t, ans) in enumerate(zip(tasks, answers))]
        got = check_answers(attempts, settings, _recording_runner(seen))
        assert [c.outcome for c in got] == ["wrong"] * 3
    assert len(seen) == 6
    for job in seen:
        text = job.program + "".join(job.calls) + "".join(job.literals)
        assert "GOLD-" not in text, job
    code_o_jobs = [j for j in seen if j.job_id.startswith("a0")]
    assert all(j.program == "" for j in code_o_jobs), "a prediction runs in a job that runs nothing else"


def test_each_deterministic_run_is_its_own_job():
    seen: list[Job] = []
    p = Proposal("p", "code_o", "<answer>```python\ndef f(a):\n    return a\n```\n```input\n1\n```</answer>")
    [v] = validate_proposals([p], TasksConfig(deterministic_runs=3), _recording_runner(seen))
    assert v.valid and len(seen) == 3 and len({j.job_id for j in seen}) == 3
    assert all(not j.literals for j in seen)


@pytest.mark.parametrize("backend", ["zygote", "gvisor"])
def test_the_fork_source_holds_nothing_of_earlier_jobs(backend):
    """One worker validates a code_f proposal whose program holds a marker; then a job forked by the same
    worker scans every readable byte of its own memory for that marker. It must not find it, while it does find
    a marker in its own program (the scan works). The zygote that read the first job never forks jobs."""
    from tests.conftest import zygote_or_skip
    from tests.sandbox.conftest import gvisor_or_skip

    secret, control, own = ("SECRET-PROGRAM-", "CONTROL-PROGRAM-", "OWN-PROGRAM-")
    tail = "MARKER-" + "93a1" * 4
    # the needle is built inside the scan, the same way for each marker, so each count includes the same copies
    # the scan itself makes; only an earlier job's leftovers would lift the secret's count over the control's
    scan = (
        "import ctypes\n"
        "def f(head, tail):\n"
        "    needle = (head + tail).encode()\n"
        "    found = 0\n"
        "    for line in open('/proc/self/maps'):\n"
        "        span, perms, *rest = line.split()\n"
        "        if not perms.startswith('r') or (rest and rest[-1].startswith('[v')):\n"
        "            continue\n"
        "        lo, hi = (int(a, 16) for a in span.split('-'))\n"
        "        for at in range(lo, hi, 1 << 20):\n"
        "            found += ctypes.string_at(at, min(hi - at, (1 << 20) + len(needle) - 1)).count(needle)\n"
        "    return found\n"
        f"# {own}{tail}\n")
    ex = (zygote_or_skip if backend == "zygote" else gvisor_or_skip)(workers=1)
    try:
        code_f = ("<answer>" + "".join(f"```input\n{k}\n```\n" for k in range(10))
                  + "```message\nadds seven\n```</answer>")
        program = f"def g(x):\n    '{secret}{tail}'\n    return x + 7"
        [v] = validate_proposals([Proposal("p", "code_f", code_f, program)], TasksConfig(timeout_s=3.0), ex.run)
        assert v.valid, v.detail
        calls = [f"f({head!r}, {tail!r})" for head in (secret, control, own)]
        [r] = ex.run([Job("scan", scan, calls=calls, timeout_s=20.0, memory_mb=1024)])
        assert r.status == "ok", (r.status, r.error)
        secret_hits, control_hits, own_hits = r.values
        assert own_hits > control_hits, "the scan must find the marker of its own program"
        assert secret_hits == control_hits, f"an earlier job's program is in this job's memory: {r.values}"
    finally:
        ex.close()


@pytest.mark.parametrize("task_type", ["code_o", "code_i"])
def test_gold_that_is_not_a_literal_is_a_verifier_error_not_a_crash(task_type):
    t = Triplet(task_type, "def f(a):\n    return a", ["1"], ["__import__('os')"])
    [c] = check_answers([Attempt("a", t, "<think>t</think><answer>1</answer>")], SETTINGS,
                        _recording_runner([]))
    assert c.outcome == "verifier_error" and "gold output 1" in c.detail
