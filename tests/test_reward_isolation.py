"""``[[rewards]] isolation``: a function reward's calls in a forked child that is killed at the limit.

The math tests run TRL's own ``accuracy_reward`` (math-verify, sympy) in a real forked child: on a
reward thread its time limits are off and ``\\boxed{(10^{10})!}`` runs until ``timeout_s``.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from polyrl import resume_config
from polyrl.config import RunConfig
from polyrl.errors import ConfigError, RewardError
from polyrl.plugins import get_plugin_manager
from polyrl.rewards import guard, isolation
from polyrl.rewards.combine import RewardComputer
from polyrl.rewards.functions import FunctionReward, function_reward_plugin, load_function_reward
from polyrl.rewards.guard import RewardCancelled
from polyrl.types import Completion, RewardContext

from small_runs import cli_error_line

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="process isolation needs os.fork")

CHAT = [{"role": "user", "content": "What is 2 + 2?"}]


def computer_for(plugins, timeout_s=30.0, should_stop=None, columns=("prompt", "solution")):
    return RewardComputer(get_plugin_manager(extra=plugins, entry_points=False),
                          [(p.name, 1.0, {}) for p in plugins], columns=columns,
                          timeouts={p.name: timeout_s for p in plugins}, should_stop=should_stop)


def score(computer, texts, solution="4"):
    rows = [{"prompt": CHAT, "solution": solution} for _ in texts]
    comps = [Completion(0, [1], [7], [0.0], text=t) for t in texts]
    context = RewardContext(rows=rows, wanted=tuple(computer.names), completion_ids=[[7] for _ in texts])
    return computer([r["prompt"] for r in rows], comps, context)


def assert_reaped(pid: int) -> None:
    with pytest.raises(ChildProcessError):  # not a child of ours any more: reaped
        os.waitpid(pid, os.WNOHANG)
    with pytest.raises(ProcessLookupError):  # and gone
        os.kill(pid, 0)


def reward_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("polyrl-")]


@pytest.fixture()
def forks(monkeypatch):
    """The pids of the children ``os.fork`` made during the test (the real fork, recorded)."""
    made: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            made.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return made


# --- TRL's accuracy_reward: math-verify's own limits work in the child -------------------------------


@pytest.mark.parametrize("bomb", [r"\boxed{(10^{10})!}", r"\boxed{2^{2^{64}}}"])
def test_a_sympy_bomb_scores_zero_in_seconds_and_leaves_nothing_behind(bomb, forks):
    pytest.importorskip("math_verify")
    from trl.rewards import accuracy_reward

    plugin = function_reward_plugin(accuracy_reward)
    assert plugin.isolation == "process"  # "auto" for a math-verify reward
    before = reward_threads()
    # math-verify's 5 s verify limit scores it 0; the reward's own 30 s timeout would raise instead
    # (seen in the scores, not timed: a bound of 15 s on the elapsed time measured the machine)
    res = score(computer_for([plugin], timeout_s=30.0), [bomb, r"\boxed{4}"])
    np.testing.assert_array_equal(res.per_reward["accuracy_reward"], [0.0, 1.0])
    assert res.extra["answer_parsed"][1] != "[unparseable]"  # log_extra came back from the child
    assert len(forks) == 1
    assert_reaped(forks[0])
    assert reward_threads() == before


def test_auto_picks_a_child_for_math_verify_rewards_only():
    pytest.importorskip("math_verify")
    from trl.rewards import (accuracy_reward, get_cosine_scaled_reward, reasoning_accuracy_reward,
                             think_format_reward)

    def mine(completions, **kwargs):
        return accuracy_reward(completions, **kwargs)

    for fn in (accuracy_reward, reasoning_accuracy_reward, get_cosine_scaled_reward(100),
               functools.partial(accuracy_reward, log_extra=None)):
        assert isolation.resolve(fn, "auto") == "process", fn
    for fn in (think_format_reward, mine, len):
        assert isolation.resolve(fn, "auto") == "thread", fn
    assert load_function_reward("trl.rewards:accuracy_reward").isolation == "process"
    assert load_function_reward("trl.rewards:accuracy_reward", isolation="thread").isolation == "thread"


MV_FILE = """
import math_verify
from math_verify import parse, verify


def accuracy(completions, solution, **kwargs):  # the open-r1 / TRL-docs accuracy reward
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [float(verify(parse(s), parse(t))) for s, t in zip(solution, texts)]


def _check(text):
    return math_verify.verify(parse("4"), parse(text))


def through_a_helper(completions, **kwargs):
    return [float(_check(c[0]["content"])) for c in completions]


def imports_inside(completions, **kwargs):
    from math_verify import parse
    return [float(bool(parse(c[0]["content"]))) for c in completions]


def format_reward(completions, **kwargs):  # the same file, no math-verify: stays on the thread
    return [float("<think>" in c[0]["content"]) for c in completions]
"""


def test_auto_picks_a_child_for_a_users_own_math_verify_reward(tmp_path, forks):
    """A user's file importing parse/verify (open-r1's accuracy reward, which TRL runs unchanged)
    ran on the reward thread, where math-verify's parse raises; auto now forks it, and only it."""
    pytest.importorskip("math_verify")
    path = tmp_path / "mv_reward.py"
    path.write_text(MV_FILE)
    for name in ("accuracy", "through_a_helper", "imports_inside"):
        assert load_function_reward(f"{path}:{name}").isolation == "process", name
    assert load_function_reward(f"{path}:format_reward").isolation == "thread"
    assert load_function_reward(f"{path}:accuracy", isolation="thread").isolation == "thread"
    plugin = load_function_reward(f"{path}:accuracy")
    res = score(computer_for([plugin]), [r"\boxed{4}", r"\boxed{5}"])
    assert list(res.total) == [1.0, 0.0] and len(forks) == 1


def test_a_reward_that_needs_the_main_thread_names_isolation_process(tmp_path):
    """math-verify's "doesn't support threaded environment" (or Python's "signal only works in main
    thread") on the reward thread: the Fix is the one setting, not "fix the reward function"."""
    pytest.importorskip("math_verify")
    path = tmp_path / "mv_reward.py"
    path.write_text(MV_FILE)
    plugin = load_function_reward(f"{path}:accuracy", isolation="thread")

    def alarm(completions, **kwargs):
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        return [0.0] * len(completions)

    for reward in (plugin, function_reward_plugin(alarm, isolation="thread")):
        with pytest.raises(RewardError) as caught:
            score(computer_for([reward]), [r"\boxed{4}"])
        assert 'Fix: set isolation = "process" in its [[rewards]] entry' in str(caught.value), caught.value
    with pytest.raises(RewardError, match="Fix: fix the reward function"):  # another ValueError: as before
        score(computer_for([function_reward_plugin(lambda completions, **kw: int("x"), isolation="thread")]),
              ["4"])


# --- timeouts and stops kill the child -----------------------------------------------------------


#: A sleeper answers only after this (far past the 1 s timeouts here): a computer that waited for it
#: gets its scores instead of raising, so the raise shows the cut (not a bound on the elapsed time,
#: which measured the machine); a broken kill fails the test instead of hanging it.
SLEEPER_ANSWERS_AFTER_S = 60


def sleeper(pid_file: Path):
    def sleeps_forever(completions, **kwargs):
        # whole or not at all: the stop test stops it once the file exists, and a child killed
        # between write_text's open and its write left an empty file (int('') in the test)
        tmp = pid_file.with_suffix(".tmp")
        tmp.write_text(str(os.getpid()))
        tmp.replace(pid_file)
        for _ in range(SLEEPER_ANSWERS_AFTER_S):
            time.sleep(1)
        return [1.0] * len(completions)
    return sleeps_forever


def test_a_reward_that_never_answers_is_killed_at_its_timeout(tmp_path):
    pid_file = tmp_path / "pid"
    plugin = function_reward_plugin(sleeper(pid_file), isolation="process")
    with pytest.raises(RewardError, match=r"within 1 s and its process was killed"):
        score(computer_for([plugin], timeout_s=1.0), ["a", "b"])
    pid = int(pid_file.read_text())
    assert pid != os.getpid()
    assert_reaped(pid)


def test_a_stop_request_kills_the_child_after_the_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(guard, "STOP_GRACE_S", 0.2)
    pid_file = tmp_path / "pid"
    plugin = function_reward_plugin(sleeper(pid_file), isolation="process")
    with pytest.raises(RewardCancelled, match="its process was killed"):
        score(computer_for([plugin], timeout_s=60.0, should_stop=lambda: pid_file.exists()), ["a"])
    assert_reaped(int(pid_file.read_text()))


ORPHAN = """
import os, sys, time
from polyrl.rewards.forked import call_forked

def sleeps(path=sys.argv[1]):
    open(path + ".tmp", "w").write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    while True:
        time.sleep(1)

call_forked(sleeps, label="sleeps", timeout_s=60)
"""


def dead(pid: int) -> bool:
    try:
        return "\tZ" in Path(f"/proc/{pid}/status").read_text()  # a zombie is dead, awaiting its reaper
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_trainer_killed_outright_leaves_no_reward_child_running(tmp_path):
    import subprocess

    pid_file = tmp_path / "pid"
    trainer = subprocess.Popen([sys.executable, "-c", ORPHAN, str(pid_file)])
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert not dead(child)
    finally:
        trainer.kill()
        trainer.wait()
    deadline = time.monotonic() + 60  # a bound, not a measure: the loop ends as soon as it is dead
    while not dead(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dead(child)


# --- the child runs any function the thread runs, with the same answer and the same errors ------------


def closure_rewards():
    bonus = 0.25  # captured: a closure cannot be pickled, and need not be

    def closure(completions, solution, log_metric, log_extra, **kwargs):
        log_metric("length", float(sum(len(c[0]["content"]) for c in completions)))
        log_extra("seen", [c[0]["content"].upper() for c in completions])
        log_extra("pid", [os.getpid()] * len(completions))
        return np.array([float(c[0]["content"].endswith(s)) + bonus for c, s in zip(completions, solution)])

    async def awaited(completions, **kwargs):
        return [len(c[0]["content"]) * bonus for c in completions]

    return [closure, awaited, lambda completions, **kw: [None, bonus * 2]]


def test_a_closure_gives_the_same_answer_in_a_child_as_on_a_thread():
    texts = ["so 4", "5"]
    results = {}
    for mode in ("thread", "process"):
        plugins = [function_reward_plugin(fn, name=f"r{i}", isolation=mode) for i, fn in enumerate(closure_rewards())]
        assert [p.isolation for p in plugins] == [mode] * 3
        results[mode] = score(computer_for(plugins), texts)
    thread, process = results["thread"], results["process"]
    assert set(thread.extra.pop("pid")) == {os.getpid()}
    assert os.getpid() not in process.extra.pop("pid")  # really ran elsewhere
    np.testing.assert_array_equal(process.total, thread.total)
    for name in thread.per_reward:
        np.testing.assert_array_equal(process.per_reward[name], thread.per_reward[name])
        drop_latency = [{k: v for k, v in m[name].items() if k != "latency_s"} for m in (thread.metrics,
                                                                                     process.metrics)]
        assert drop_latency[0] == drop_latency[1]
    assert process.extra == thread.extra == {"seen": ["SO 4", "5"]}
    assert process.metric_counts == thread.metric_counts == {"r0": {"length": 1}}  # log_metric's calls, for the ranks' mean
    np.testing.assert_array_equal(process.total, [1.25 + 1.0, 0.25 + 0.25 + 0.5])


class Odd(Exception):
    def __init__(self, a, b):  # pickles, but does not unpickle
        super().__init__(f"{a}/{b}")


def raises(completions, **kwargs):
    raise ValueError("no score for you")


def raises_odd(completions, **kwargs):
    raise Odd(1, 2)


def exits(completions, **kwargs):
    sys.exit(3)


def hard_exits(completions, **kwargs):
    os._exit(4)


@pytest.mark.parametrize("fn", [raises, raises_odd, exits, hard_exits])
def test_a_failing_reward_is_the_same_error_as_on_a_thread(fn):
    errors = {}
    for mode in ("thread", "process"):
        with pytest.raises(RewardError) as caught:
            score(computer_for([function_reward_plugin(fn, isolation=mode)]), ["4"])
        errors[mode] = str(caught.value)
    assert errors["process"] == errors["thread"]
    assert len(errors["process"].splitlines()) == 1


def killed_by_a_signal(completions, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def unsendable(completions, **kwargs):  # a log_extra value is sent as the completions log shows it: its repr
    return [threading.Lock()] * len(completions)


def answers_an_object(completions, **kwargs):
    return [Odd(1, 2)] * len(completions)  # not JSON data: never pickled across


@pytest.mark.parametrize("fn, message", [
    (killed_by_a_signal, "its process was killed by SIGKILL before it answered"),
    (unsendable, "its answer could not be sent back"),
    (answers_an_object, "its answer could not be sent back"),
])
def test_a_child_that_dies_or_answers_garbage_is_the_rewards_error(fn, message, forks):
    with pytest.raises(RewardError, match=message) as caught:
        score(computer_for([function_reward_plugin(fn, isolation="process")]), ["4"])
    assert f"reward {fn.__name__!r}" in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1
    assert_reaped(forks[0])


# --- configuration ---------------------------------------------------------------------------------


def config(**reward):
    return RunConfig.from_dict({"model": {"path": "m"}, "data": {"task": "arithmetic"}, "rewards": [reward]})


@pytest.mark.parametrize("reward, message", [
    ({"function": "m:f", "isolation": "fork"}, "rewards[0].isolation: unknown isolation 'fork'"),
    ({"function": "m:f", "isolation": 1}, "rewards[0].isolation: expected str"),
    ({"name": "numeric_match", "isolation": "process"}, "rewards[0].isolation: isolation applies to function "
                                                        "rewards only"),
])
def test_a_bad_isolation_is_one_error_naming_the_field(reward, message):
    with pytest.raises(ConfigError) as caught:
        config(**reward)
    text = str(caught.value)
    assert text.startswith(message) and "Fix: " in text and len(text.splitlines()) == 1


def test_polyrl_train_prints_one_error_line_for_a_bad_isolation(tiny_model_dir, tmp_path):
    line = cli_error_line(tiny_model_dir, tmp_path, '[[rewards]]\nfunction = "m.py:f"\nisolation = "fork"\n')
    assert line.startswith("error: rewards[1].isolation: unknown isolation 'fork'. Fix: use \"auto\"")


def test_without_fork_process_is_an_error_and_auto_a_thread(monkeypatch):
    pytest.importorskip("math_verify")
    from trl.rewards import accuracy_reward

    monkeypatch.setattr(isolation, "FORK_AVAILABLE", False)
    with pytest.raises(ConfigError, match=r"^rewards\[0\]\.isolation: isolation \"process\" needs os.fork"):
        config(function="m:f", isolation="process")
    with pytest.raises(ConfigError, match=r"rewards.isolation: .*needs os.fork"):
        FunctionReward(accuracy_reward, isolation="process")
    assert FunctionReward(accuracy_reward).isolation == "thread"


def test_a_checkpoint_from_before_isolation_still_resumes():
    current = config(function="m:f")
    saved = resume_config.snapshot(current)
    saved["rewards"] = [{k: v for k, v in entry.items() if k != "isolation"} for entry in saved["rewards"]]
    assert resume_config.check(saved, current, weights_only=False) == []
    with pytest.raises(ConfigError, match="rewards"):  # a real change is still refused
        resume_config.check(saved, config(function="m:f", isolation="thread"), weights_only=False)


# --- in a real run (tiny model, torch backend: fork in a process that holds torch) -------------------


def run_config(model: str, tmp_path: Path, rewards: list[dict]) -> RunConfig:
    import json

    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"What is {i} + 2?"}],
                                        "solution": str(i + 2)}) + "\n" for i in range(2)))
    return RunConfig.from_dict({
        "model": {"path": model}, "data": {"path": str(data)},
        "generation": {"group_size": 2, "max_new_tokens": 4},
        "rewards": rewards,
        "train": {"steps": 2, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")},
    })


def test_trls_accuracy_reward_runs_in_a_child_in_a_training_run(tiny_model_dir, tmp_path, forks):
    pytest.importorskip("math_verify")
    from polyrl.trainer import Trainer

    config = run_config(tiny_model_dir, tmp_path, [{"function": "trl.rewards:accuracy_reward"}])
    history = Trainer(config).run(progress=False)["history"]
    assert [m["reward/accuracy_reward/mean"] for m in history] == [0.0, 0.0]  # a random model boxes nothing
    assert len(forks) == 2  # one child per call
    for pid in forks:
        assert_reaped(pid)


PID_REWARD = '''
import os


def pid_reward(completions, log_metric, **kwargs):
    log_metric("pid", float(os.getpid()))
    return [0.0] * len(completions)
'''


def test_the_configured_isolation_reaches_the_run(tiny_model_dir, tmp_path):
    from polyrl.trainer import Trainer

    (tmp_path / "pid_rewards.py").write_text(PID_REWARD)
    spec = f"{tmp_path / 'pid_rewards.py'}:pid_reward"
    config = run_config(tiny_model_dir, tmp_path, [{"function": spec, "isolation": "process"}])
    history = Trainer(config).run(progress=False)["history"]
    assert all(m["reward/pid_reward/pid"] != os.getpid() for m in history)


@pytest.mark.parametrize("data", [b"\x80\x03garbage", b'{"kind": "ok"}', b"[1, 2]", b'{"kind": "what"}'])
def test_bytes_that_are_no_answer_are_the_rewards_error_not_unpickled(data):
    """The parent reads the child's answer as JSON only (polyrl never unpickles)."""
    from polyrl.rewards import forked, guard

    with pytest.raises(guard.RewardCallFailed) as caught:
        forked._answer(data, 0)
    assert isinstance(caught.value.cause, forked.RewardProcessFailed)
    assert re.search("unreadable bytes|unknown answer", str(caught.value.cause))


def _private_dirty_kb() -> int:
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Private_Dirty:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux's smaps_rollup")
def test_a_forked_child_collecting_garbage_does_not_copy_the_parents_heap():
    """The tests' forked copy of the trainer is capped in address space, not in copied pages: its
    collector wrote to the header of every object the trainer held, so each copy privately
    duplicated the trainer's heap (351 MB for 0.6 GB of objects). The child freezes them first.
    Measured on its own private memory: a collection before and after ``gc.unfreeze()``."""
    import gc

    from polyrl.rewards import forked

    heap = [[i] for i in range(600_000)]  # ~40 MB of tracked objects

    def collect_twice() -> list[int]:
        start = _private_dirty_kb()
        gc.collect()
        frozen = _private_dirty_kb()
        gc.unfreeze()  # what the child did before: every object in reach of the collector
        gc.collect()
        return [frozen - start, _private_dirty_kb() - frozen]

    frozen_kb, unfrozen_kb = forked.call_forked(collect_twice, label="heap", timeout_s=60)
    assert len(heap) == 600_000
    assert frozen_kb < max(8_000, unfrozen_kb / 4), (frozen_kb, unfrozen_kb)
    assert unfrozen_kb > 20_000, unfrozen_kb  # the measurement sees the heap being copied


def test_a_forked_child_keeps_only_the_descriptors_it_is_given():
    """A forked child kept every descriptor of the parent: another thread's pipe to a sandboxed
    sample stayed open in it, so that sample never saw EOF (its output was lost). With
    ``keep_fds`` the child lets go of the others while it runs, and its own still work."""
    import select

    from polyrl.rewards import forked

    other_r, other_w = os.pipe()
    own_r, own_w = os.pipe()
    answers: dict[str, object] = {}

    def child() -> str:
        os.write(own_w, b"k")
        time.sleep(2.0)
        return "done"

    thread = threading.Thread(target=lambda: answers.setdefault(
        "child", forked.call_forked(child, label="fds", timeout_s=30, keep_fds=(own_w,))))
    thread.start()
    try:
        assert select.select([own_r], [], [], 20)[0], "the child never wrote on its own descriptor"
        os.close(other_w)
        assert select.select([other_r], [], [], 1.0)[0], "no EOF while the child runs: it holds the pipe"
        assert os.read(other_r, 1) == b""
    finally:
        thread.join()
        for fd in (other_r, own_r, own_w):
            os.close(fd)
    assert answers["child"] == "done"


def test_a_forked_function_reward_lets_go_of_the_trainers_pipes_and_keeps_its_files(tmp_path, capfd):
    """A function reward's child (isolation = "process") kept every descriptor of the trainer:
    it could read a pipe the trainer held (another thread's sandboxed sample, a server's or a
    collective's connection) and kept it open, so its other end never saw EOF. Now it keeps
    stdin/stdout/stderr, its answer pipe and regular files (the reward's own log or cache)."""
    secret_r, secret_w = os.pipe()
    os.write(secret_w, b"trainer-secret")
    words = tmp_path / "words.txt"
    words.write_text("alpha")
    own = open(words)  # noqa: SIM115 - opened before the call, as a reward's word list at import

    def peeks(completions, **kwargs):
        try:
            piped = os.read(secret_r, 64).decode()
        except OSError as exc:
            piped = f"OSError {exc.errno}"
        own.seek(0)
        print("printed from the child", flush=True)
        return [1.0 if piped == "" and own.read() == "alpha" else 0.0 for _ in completions]

    try:
        res = score(computer_for([function_reward_plugin(peeks, isolation="process")]), ["4"])
        assert res.per_reward["peeks"] == [1.0], "the child read the trainer's pipe or lost its own file"
        assert "printed from the child" in capfd.readouterr().out
        assert os.read(secret_r, 64) == b"trainer-secret"  # the trainer's copy is untouched
    finally:
        own.close()
        os.close(secret_r), os.close(secret_w)


def test_a_checkpoint_from_before_timeout_s_could_be_unset_still_resumes():
    """[[rewards]] timeout_s is unset by default now (600 s, grown with the batch), where
    checkpoints saved the default 600.0, which grew as an unset one does: they resume as before."""
    current = config(function="m:f")
    assert current.rewards[0].timeout_s is None
    saved = resume_config.snapshot(current)
    saved["rewards"] = [{**entry, "timeout_s": 600.0} for entry in saved["rewards"]]
    assert resume_config.check(saved, current, weights_only=False) == []
    with pytest.raises(ConfigError, match="rewards"):  # a real change is still refused
        resume_config.check(saved, config(function="m:f", timeout_s=30), weights_only=False)


@pytest.mark.skipif(not sys.platform.startswith("linux") or not isolation.FORK_AVAILABLE,
                    reason="reads /proc/<pid>/fd of a forked child's parent")
def test_a_forked_reward_child_is_no_sandbox_closing_its_descriptors_hides_nothing(tmp_path):
    """Why ``isolation = "process"`` does not close the reward's regular files: the child is the
    trainer's user, so a descriptor it let go of (even of a file deleted since, reachable only
    through the trainer's descriptor) is still open to it through ``/proc/<trainer>/fd``. Code
    from a completion belongs in the code_tests sandbox, never in a reward (README says so)."""
    from polyrl.rewards import forked

    key = tmp_path / "tracker.key"
    key.write_text("TRACKER-KEY")
    held = open(key)  # noqa: SIM115 - the trainer's descriptor, as a tracker's key file
    key.unlink()

    def reads(folder: str) -> bool:
        found = False
        for name in os.listdir(folder):
            try:
                fd = os.open(f"{folder}/{name}", os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                found |= os.fstat(fd).st_size > 0 and b"TRACKER-KEY" in os.pread(fd, 64, 0)
            except OSError:
                pass
            finally:
                os.close(fd)
        return found

    def hostile() -> list[bool]:
        return [reads("/proc/self/fd"), reads(f"/proc/{os.getppid()}/fd")]

    try:
        own, trainers = forked.call_forked(hostile, label="peek", timeout_s=20, keep_fds=(), keep_files=False)
    finally:
        held.close()
    assert not own and trainers, "closing the child's copies hid the trainer's file: say so in the README"


def test_two_rewards_logging_one_extra_column_are_said_once_and_the_later_ones_values_kept():
    """Two reward functions calling ``log_extra("parsed", ...)``: the later one's values silently
    replaced the earlier one's (TRL appends both lists, misaligning its table); now a warning names
    the column and both rewards, once however many steps, and the table keeps the later values."""
    from structlog.testing import capture_logs

    def first(completions, log_extra, **kwargs):
        log_extra("parsed", ["a"] * len(completions))
        return [1.0] * len(completions)

    def second(completions, log_extra, **kwargs):
        log_extra("parsed", ["b"] * len(completions))
        log_extra("own", ["c"] * len(completions))
        return [0.0] * len(completions)

    plugins = [function_reward_plugin(fn, name=fn.__name__, isolation="thread") for fn in (first, second)]
    computer = computer_for(plugins)
    with capture_logs() as logs:
        results = [score(computer, ["4", "5"]) for _ in range(2)]
    assert all(r.extra == {"parsed": ["b", "b"], "own": ["c", "c"]} for r in results)
    said = [e for e in logs if e.get("column") == "parsed" and "same log_extra column" in e["event"]]
    assert len(said) == 1 and said[0]["rewards"] == ["first", "second"], logs
    assert not [e for e in logs if e.get("column") == "own"]
