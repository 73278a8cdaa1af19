"""generation.overlap: step k+1 sampled on a worker thread while step k trains (torch, tiny model)."""

from __future__ import annotations

import hashlib
import json

import attrs
import numpy as np
import pytest

from polyrl.config import RunConfig
from polyrl.errors import ConfigError
from polyrl.rollout_state import pending_rollout_problem
from polyrl.rollouts import Rollout
from polyrl.run_observer import StepAsk
from polyrl.strict_json import dumps
from polyrl.trainer import Trainer
from polyrl.types import Completion

from observer_util import AskAfterStep
from toy_dist import activate, install_toy_dists


def overlap_config(model: str, out, overlap: bool = True, **train) -> RunConfig:
    return RunConfig.from_dict({
        "model": {"path": model},
        "generation": {"group_size": 4, "max_new_tokens": 8, "overlap": overlap},
        "optimizer": {"lr": 1e-2},
        "data": {"task": "arithmetic", "options": {"count": 64}},
        "rewards": [{"name": "numeric_match"}, {"name": "length_penalty", "weight": 0.5,
                                                "options": {"target": 4, "unit": "chars"}}],
        "train": {"steps": 4, "prompts_per_step": 2, "threads": 1, "output_dir": str(out), **train},
    })


def digest(weights: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(weights):
        h.update(name.encode())
        h.update(np.ascontiguousarray(weights[name]).tobytes())
    return h.hexdigest()


def test_overlap_samples_one_step_behind_and_trains_against_the_sampler_logprobs(tiny_model_dir, tmp_path):
    trainer = Trainer(overlap_config(tiny_model_dir, tmp_path / "run"))
    assert trainer.gen_engine is not trainer.train_engine  # a copy: training must not touch it mid-sample

    sampled_with: dict[int, str] = {}  # step -> digest of the generator's weights when it sampled
    generate = trainer.rollouts._generate

    def recording_generate(step, rows):
        sampled_with[step] = digest(trainer.gen_engine.export_weights())
        return generate(step, rows)

    trainer.rollouts._generate = recording_generate
    batches = []
    train_step = trainer.train_engine.train_step

    def recording_train_step(batch, objective):
        batches.append(batch)
        return train_step(batch, objective)

    trainer.train_engine.train_step = recording_train_step
    after_updates = [digest(trainer.train_engine.export_weights())]
    completions = {}
    take = trainer.rollouts.take

    def recording_take(step):
        rollout = take(step)
        if rollout is not None:
            completions[step] = rollout.completions
        return rollout

    trainer.rollouts.take = recording_take
    for _ in range(4):
        metrics = trainer.train_one_step()
        assert not metrics.get("skipped"), metrics
        trainer.step += 1
        trainer.history.append(metrics)
        after_updates.append(digest(trainer.train_engine.export_weights()))
    trainer.rollouts.close()

    assert len(set(after_updates)) == 5  # every step changed the weights
    # step 0 from the initial weights; step k >= 1 from the weights after k - 1 updates
    assert sampled_with == {0: after_updates[0], 1: after_updates[0], 2: after_updates[1], 3: after_updates[2]}
    assert [m["policy_lag"] for m in trainer.history] == [0, 1, 1, 1]
    assert batches[0].old_logprobs is None  # on-policy: the ratio is to the current policy
    for step in (1, 2, 3):  # off-policy: the ratio is to the sampler's own log-probs
        batch, sampled = batches[step], completions[step]
        kept = [c for c in sampled if any(np.array_equal(c.completion_ids, s.completion_ids)
                                          and np.array_equal(c.prompt_ids, s.prompt_ids)
                                          for s in batch.sequences)]
        assert len(batch.old_logprobs) == len(batch.sequences) == len(kept)
        for old, seq in zip(batch.old_logprobs, batch.sequences):
            match = next(c for c in sampled if np.array_equal(c.completion_ids, seq.completion_ids)
                         and np.array_equal(c.prompt_ids, seq.prompt_ids))
            np.testing.assert_array_equal(old, match.logprobs)
        # ... which are not the trained policy's: the lag is real and the ratio sees it
        current = trainer.train_engine.logprobs(batch.sequences, batch.temperature)
        assert max(np.abs(a - b).max() for a, b in zip(current, batch.old_logprobs)) > 1e-4


def test_overlap_resume_trains_on_the_pending_rollout_and_continues_exactly(tiny_model_dir, tmp_path):
    clean = Trainer(overlap_config(tiny_model_dir, tmp_path / "clean", steps=5))
    clean_summary = clean.run(progress=False)

    interrupted = Trainer(overlap_config(tiny_model_dir, tmp_path / "crash", steps=5))
    for _ in range(2):
        interrupted.history.append(interrupted.train_one_step())
        interrupted.step += 1
    saved = interrupted.save()  # step 2's rollout is being sampled: the checkpoint holds it
    interrupted.rollouts.close()
    from polyrl import checkpoint as ckpt

    pending = ckpt.read_state(saved)["pending_rollout"]
    assert pending["step"] == 2 and pending["policy_version"] == 1

    resumed = Trainer(overlap_config(tiny_model_dir, tmp_path / "crash", steps=5))
    assert resumed.resume()
    summary = resumed.run(progress=False)
    tail = summary["history"][-3:]
    expected = clean_summary["history"][2:]
    assert [m["step"] for m in tail] == [3, 4, 5]
    assert [m["policy_lag"] for m in tail] == [1, 1, 1]
    for key in ("reward_mean", "loss", "completion_len_mean"):
        assert [m[key] for m in tail] == [m[key] for m in expected], key
    a = clean.train_engine.export_weights()
    b = resumed.train_engine.export_weights()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)

    # without overlap the same checkpoint's prompts are drawn again and sampled on-policy
    on_policy = Trainer(overlap_config(tiny_model_dir, tmp_path / "crash", overlap=False, steps=3))
    assert on_policy.resume(saved)
    step = on_policy.train_one_step()
    assert step["policy_lag"] == 0 and step["step"] == 3


def test_overlap_rejects_a_backend_that_cannot_generate_concurrently(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "broken,badreg")
    deactivate = activate(install_toy_dists(tmp_path / "site"))
    try:
        config = RunConfig.from_dict({
            "model": {"path": "toy-model"}, "backends": {"train": "toy"},
            "generation": {"group_size": 4, "max_new_tokens": 8, "overlap": True},
            "data": {"task": "arithmetic", "options": {"count": 64}},
            "rewards": [{"name": "toy_sevens"}], "train": {"output_dir": str(tmp_path / "run")},
        })
        with pytest.raises(ConfigError, match="concurrent_generate") as err:
            Trainer(config)
        assert err.value.field == "generation.overlap" and "overlap = false" in str(err.value)
    finally:
        deactivate()


def test_overlap_is_refused_under_a_launcher(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="launcher") as err:
        Trainer(overlap_config(tiny_model_dir, tmp_path / "run"))
    assert err.value.field == "generation.overlap"


def test_overlap_must_be_a_boolean(tiny_model_dir, tmp_path):
    data = {"model": {"path": tiny_model_dir}, "data": {"task": "arithmetic"},
            "rewards": [{"name": "numeric_match"}], "generation": {"overlap": "yes"}}
    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict(data)
    assert err.value.field == "generation.overlap"


def test_a_pending_rollout_keeps_every_completion_field_through_a_checkpoint():
    """Each ``Completion`` field an episode sets comes back equal from a checkpoint: one left out
    (``prompt_messages`` once) came back as its default, and the resumed step's rewards scored
    the dataset row's prompt instead of what the environment asked."""
    episode = Completion(prompt_index=1, prompt_ids=[5, 6], completion_ids=[7, 8, 9], logprobs=[-0.5, 0.0, -1.5],
                         text="9", finish_reason="stop", mask=[True, False, True],
                         messages=[{"role": "assistant", "content": "7"}, {"role": "user", "content": "again"}],
                         prompt_messages=[{"role": "user", "content": "ENV-ASKED: say hello"}],
                         info={"turns": 2, "tool_calls": 0, "env_reward": 0.5}, reasoning_open=True)
    defaults = Completion(prompt_index=0, prompt_ids=[1], completion_ids=[], logprobs=[])
    #: held in memory only (TRL's environment instances): a run whose rewards read it refuses overlap;
    #: response_message: set on the reward computer's own copies (TRL's response_schema parse of the
    #: ids), never on a rollout's completions (generate may not set it), so none is checkpointed
    live = {"environment", "response_message"}
    for field in attrs.fields(Completion):  # the example sets every field: a new one must be added here
        if field.name not in live:
            assert not _equal(getattr(episode, field.name), getattr(defaults, field.name)), field.name
    rollout = Rollout(step=3, rows=[{}, {}], completions=[episode, defaults], policy_version=2, seconds=1.5,
                      sampler_before={"epoch": 0})
    state = json.loads(dumps(rollout.as_state()))
    assert pending_rollout_problem(state, step=3, prompts=2) is None
    back = Rollout.from_state(state, rows=[{}, {}])
    for before, after in zip(rollout.completions, back.completions):
        for field in attrs.fields(Completion):
            assert _equal(getattr(before, field.name), getattr(after, field.name)), field.name
    state["completions"][0]["prompt_messages"] = "not messages"
    assert pending_rollout_problem(state, step=3, prompts=2) == (
        "pending_rollout.completions[0].prompt_messages is not a list of message objects")


def _equal(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a is not None and b is not None and np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


_EXIT_WHILE_SAMPLING = """
import sys, threading, time
from polyrl.rollouts import RolloutAhead

started = threading.Event()
def generate(step, rows):
    started.set()
    time.sleep(600)  # a long generation still running when the script ends
    return []

ahead = RolloutAhead(generate)
ahead.start(1, [], {}, 0)
started.wait(30)
ahead.close(wait=False)  # what the trainer does after a second Ctrl-C (StoppedAtOnce)
print("leaving", flush=True)
"""


def test_a_script_leaves_at_once_while_a_rollout_is_sampled_ahead():
    """After a second Ctrl-C in the Python API the trainer closes the rollout worker without
    waiting; the script's exit must not wait either. A ``ThreadPoolExecutor`` worker is joined at
    interpreter exit: the script hung until the generation ended. Seen, not timed: the generation
    takes 600 s, so a script that ends within the 120 s bound did not wait for it (a bound of 30 s
    on the elapsed time, interpreter start included, measured the machine)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _EXIT_WHILE_SAMPLING], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "leaving", proc.stderr[-2000:]


def test_the_rollout_worker_runs_in_order_on_one_thread_and_passes_errors_on():
    """One persistent thread (the generate engine's thread-local state is made once), results and
    exceptions through ``take``/``pending`` as an executor's future gives them."""
    import threading

    from polyrl.rollouts import RolloutAhead

    threads = []

    def generate(step, rows):
        threads.append(threading.get_ident())
        if step == 3:
            raise ValueError("generation failed")
        return []

    ahead = RolloutAhead(generate)
    for step in (1, 2):
        ahead.start(step, [], {}, step - 1)
        assert ahead.take(step).step == step
    ahead.start(3, [], {}, 2)
    with pytest.raises(ValueError, match="generation failed"):
        ahead.take(3)
    ahead.close()
    assert len(threads) == 3 and len(set(threads)) == 1 and threads[0] != threading.get_ident()


def test_dropping_the_rollout_sampled_ahead_waits_for_it_and_leaves_none_pending():
    """``drop`` (a step left unscored or unsampled, an epoch ended: the rollout sampled ahead is of
    no use) waits for the running generation, hands the rollout back for the sampler state it
    started from and leaves none pending; a failed generation's error passes on."""
    import threading

    from polyrl.rollouts import RolloutAhead

    release = threading.Event()

    def generate(step, rows):
        assert release.wait(30)
        if step == 2:
            raise ValueError("generation failed")
        return []

    ahead = RolloutAhead(generate)
    assert ahead.drop() is None
    ahead.start(1, [{"prompt": "a"}], {"position": 3}, 0)
    threading.Timer(0.2, release.set).start()
    dropped = ahead.drop()  # returns only once the generation ran
    assert release.is_set() and dropped.step == 1 and dropped.sampler_before == {"position": 3}
    assert ahead.pending() is None and ahead.take(1) is None
    ahead.start(2, [], {}, 1)  # refused while one is pending
    with pytest.raises(ValueError, match="generation failed"):
        ahead.drop()
    ahead.close()


def _rows_per_step(trainer: Trainer) -> list[list[str]]:
    seen: list[list[str]] = []
    rollout = trainer._rollout

    def recording(times):
        out = rollout(times)
        seen.append([json.dumps(row, sort_keys=True, default=str) for row in out.rows])
        return out

    trainer._rollout = recording
    trainer.run(progress=False)
    return seen


def test_an_epoch_stop_drops_the_rollout_sampled_ahead_and_starts_the_next_epoch(tiny_model_dir, tmp_path):
    """Under overlap step 2's prompts were drawn (from epoch 0) while step 1 trained; an epoch
    stop after step 1 drops that rollout, and step 2 samples the next epoch's first prompts, as
    without overlap. 4 prompts, 2 a step: an epoch is 2 steps."""
    def config(out: str, overlap: bool, steps: int) -> RunConfig:
        return RunConfig.from_dict({
            "model": {"path": tiny_model_dir}, "generation": {"group_size": 2, "max_new_tokens": 4, "overlap": overlap},
            "data": {"task": "arithmetic", "options": {"count": 4}}, "rewards": [{"name": "numeric_match"}],
            "train": {"steps": steps, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / out)},
            "eval": {"count": 0}})

    plain = _rows_per_step(Trainer(config("plain", False, 4)))
    assert sorted(plain[0] + plain[1]) == sorted(plain[2] + plain[3])
    trainer = Trainer(config("ended", True, 3))
    trainer.observers.append(AskAfterStep(1, StepAsk(epoch_stop=True)))
    assert _rows_per_step(trainer) == [plain[0], plain[2], plain[3]]
    assert (trainer.sampler.epoch, trainer.sampler.position) == (2, 0)
