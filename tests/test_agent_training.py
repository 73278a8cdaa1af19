"""Multi-turn episodes through the whole trainer on tiny models (issue 16, point 5).

The built-in ``guess_number`` environment drives real multi-turn episodes without tool calls: the
random tiny model's turns end at a stop string ("a", "e", " "), the environment answers "Higher." /
"Lower." / "Answer with one integer...", and the next turn is sampled from the exact ids so far.
Every test runs real engines (torch, MLX, a ``polyrl serve`` subprocess, torchrun) and checks
what the episodes must guarantee: the sampled tokens' log-probs are the trainer's, only they are
trained (the loss is the numpy reference's with masks), and every other feature of a run (each
algorithm preset, LoRA, overlap with checkpoint/resume, remote generation, data parallelism)
works with them.
"""

from __future__ import annotations

import json
import string
import sys
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from crash_util import assert_same_weights

from polyrl.agents.episodes import as_messages
from polyrl.algorithms.presets import ALGORITHMS, AlgorithmConfig
from polyrl.algorithms.reference import policy_loss
from polyrl.config import RewardSection, RunConfig
from polyrl.trainer import Trainer
from polyrl.types import Completion, TokenPrompt

#: Turns end at these strings, so the random model's episodes go several turns.
STOPS = ["a", "e", " "]
MAX_EPISODE_TOKENS = 96


def agent_config(model: str, out: Path, algorithm: str | dict[str, Any] = "grpo", environment: dict[str, Any] | None = None,
                 train: dict[str, Any] | None = None, **sections: Any) -> RunConfig:
    """A tiny guess_number run; the length penalty makes the rewards of a group differ."""
    data: dict[str, Any] = {
        "model": {"path": model},
        "algorithm": algorithm if isinstance(algorithm, dict) else {"name": algorithm},
        "generation": {"group_size": 4, "max_new_tokens": 16, "stop": STOPS},
        "optimizer": {"lr": 1e-2},
        "data": {"task": "arithmetic", "options": {"count": 64}},
        "rewards": [{"name": "environment"},
                    {"name": "length_penalty", "weight": 0.5, "options": {"target": 2, "unit": "chars"}}],
        "environment": {"name": "guess_number", "max_turns": 3, "max_episode_tokens": MAX_EPISODE_TOKENS,
                        **(environment or {})},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(out), **(train or {})},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return RunConfig.from_dict(data)


class Recorder:
    """Wraps a trainer's sampling and ``train_step`` to keep what they saw.

    ``current`` holds the train engine's log-probs of each batch just before its update (the
    weights the batch was sampled with, on-policy)."""

    def __init__(self, trainer: Trainer, score_before: bool = True) -> None:
        self.rows: list[list[dict[str, Any]]] = []
        self.completions: list[list[Completion]] = []
        self.batches: list[Any] = []
        self.objectives: list[Any] = []
        self.current: list[list[np.ndarray]] = []
        self.results: list[Any] = []
        sample, train_step = trainer._sample, trainer.train_engine.train_step

        def recording_sample(rows, sampling, **kwargs):
            out = sample(rows, sampling, **kwargs)
            self.rows.append(list(rows))
            self.completions.append(out)
            return out

        def recording_train_step(batch, objective):
            if score_before:
                self.current.append(trainer.train_engine.logprobs(batch.sequences, batch.temperature))
            self.batches.append(batch)
            self.objectives.append(objective)
            result = train_step(batch, objective)
            self.results.append(result)
            return result

        trainer._sample = recording_sample
        trainer.train_engine.train_step = recording_train_step


def runs_of(mask: np.ndarray, value: bool) -> list[slice]:
    """The maximal runs of ``value`` in ``mask``, as slices."""
    out, start = [], None
    for i, m in enumerate([*mask.tolist(), not value]):
        if m == value and start is None:
            start = i
        elif m != value and start is not None:
            out.append(slice(start, i))
            start = None
    return out


def completion_for(seq: Any, completions: list[Completion]) -> Completion:
    return next(c for c in completions if np.array_equal(c.completion_ids, seq.completion_ids)
                and np.array_equal(c.prompt_ids, seq.prompt_ids))


def check_step_is_exact(rec: Recorder, step: int, decode, sampler_atol: float = 1e-4) -> None:
    """Step ``step``'s batch: masks are the episodes', the sampled tokens' log-probs are the
    trainer's, inserted segments are the environment's words, and the loss is the reference's."""
    batch, current, completions = rec.batches[step], rec.current[step], rec.completions[step]
    masks = [seq.loss_mask for seq in batch.sequences]
    assert batch.old_logprobs is None  # on-policy, one iteration: the ratio is to the current policy
    assert any((~m).any() for m in masks), "no episode went past one turn: nothing is masked"
    for seq, mask, sampler, scored in zip(batch.sequences, masks, batch.sampler_logprobs, current):
        c = completion_for(seq, completions)
        np.testing.assert_array_equal(mask, c.mask)
        np.testing.assert_allclose(sampler[mask], scored[mask], atol=sampler_atol)
        assert np.all(sampler[~mask] == 0)  # inserted tokens were never sampled
        said = [m["content"] for m in c.messages if m["role"] == "user"]
        feedback = said[: c.info["turns"] - 1]  # the observation ending the episode closes it, never inserted
        inserted = runs_of(mask, False)
        assert len(inserted) == len(feedback) == c.info["turns"] - 1
        assert len(said) - len(feedback) == (c.messages[-1]["role"] == "user")
        for span, words in zip(inserted, feedback):
            text = decode(seq.completion_ids[span])
            assert f"<|im_start|>user\n{words}<|im_end|>\n" in text, (text, words)
            assert text.endswith("<|im_start|>assistant\n"), text
    expected, ref_metrics = policy_loss(current, batch.advantages, rec.objectives[step], batch.old_logprobs,
                                        batch.ref_logprobs, batch.sampler_logprobs, masks=masks)
    result = rec.results[step]
    assert result.tokens == ref_metrics["tokens"] == sum(int(m.sum()) for m in masks)
    assert result.loss == pytest.approx(expected, rel=1e-4, abs=1e-6)


def file_decode(model_dir: str):
    """The model folder's own tokenizer, as text with the special tokens shown (any backend)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    return lambda ids: tok.decode([int(i) for i in ids], skip_special_tokens=False)


# --- 1. exactness on torch ---------------------------------------------------------------------------


def test_trained_episodes_are_exact_on_torch(tiny_model_dir, tmp_path):
    """Two steps: every sampled token's log-prob is the trainer's on the full sequence, inserted
    tokens are the environment's feedback in the template's glue, and the loss is the masked
    reference's (the second step on the weights the first one changed)."""
    trainer = Trainer(agent_config(tiny_model_dir, tmp_path / "run", train={"steps": 2}))
    rec = Recorder(trainer)
    history = []
    for _ in range(2):
        metrics = trainer.train_one_step()
        assert not metrics.get("skipped"), metrics
        trainer.step += 1
        history.append(metrics)
    for step in range(2):
        check_step_is_exact(rec, step, file_decode(tiny_model_dir))
        assert history[step]["episode/turns_mean"] > 1
        assert 0 < history[step]["episode/sampled_token_share"] < 1
        # throughput counts what the generator sampled, not the environment's inserted tokens
        sampled = sum(int(c.mask.sum()) for c in rec.completions[step])
        assert sampled < sum(len(c.completion_ids) for c in rec.completions[step])
        assert history[step]["tokens_per_s"] * history[step]["generate_seconds"] == pytest.approx(sampled, rel=0.02)
    # each episode's first prompt is the chat template of the environment's first message
    encode = trainer.train_engine.encode_chat
    for rows, completions in zip(rec.rows, rec.completions):
        for c in completions:
            first = as_messages(rows[c.prompt_index]["prompt"])  # guess_number keeps the row's prompt
            np.testing.assert_array_equal(c.prompt_ids, encode(first, None, True))


# --- 2. every algorithm preset, and LoRA -------------------------------------------------------------


@pytest.mark.parametrize("variant", [*ALGORITHMS, "grpo+lora"])
def test_every_preset_and_lora_train_a_step_of_episodes(tiny_model_dir, tmp_path, variant, monkeypatch):
    """One step each. An episode is longer than one turn's max_new_tokens: DAPO's overlong limit
    and Dr.GRPO's normaliser are the episode's token budget, not a turn's."""
    algorithm, _, lora = variant.partition("+")
    sections = {"lora": {"rank": 4, "alpha": 8}} if lora else {}
    shaping: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]] = []
    shape_rewards = AlgorithmConfig.shape_rewards

    def recording_shape_rewards(self, rewards, lengths, max_completion_length=None):
        out = shape_rewards(self, rewards, lengths, max_completion_length)
        shaping.append((np.asarray(rewards), np.asarray(lengths), out, max_completion_length))
        return out

    monkeypatch.setattr(AlgorithmConfig, "shape_rewards", recording_shape_rewards)
    trainer = Trainer(agent_config(tiny_model_dir, tmp_path / "run", algorithm=algorithm, **sections))
    rec = Recorder(trainer)
    before = trainer.train_engine.export_weights()
    metrics = trainer.train_one_step()
    assert not metrics.get("skipped"), metrics
    assert np.isfinite(metrics["loss"]) and metrics["episode/turns_mean"] > 1
    check_step_is_exact(rec, 0, file_decode(tiny_model_dir))
    after = trainer.train_engine.export_weights()
    assert any(not np.array_equal(before[k], after[k]) for k in after), "the step changed no weight"
    (raw, lengths, shaped, limit), = shaping
    assert limit == MAX_EPISODE_TOKENS and lengths.max() > 16  # episodes outgrow one turn's 16 tokens
    if algorithm == "dapo":  # no penalty below the budget minus the buffer (0.2 of it)
        short = lengths <= MAX_EPISODE_TOKENS - round(0.2 * MAX_EPISODE_TOKENS)
        assert short.any() and np.array_equal(shaped[short], raw[short])
    if algorithm == "dr_grpo":
        assert rec.objectives[0].max_completion_length == MAX_EPISODE_TOKENS


# --- 3. overlap, checkpoint and resume ---------------------------------------------------------------


@pytest.mark.slow
def test_overlap_resume_with_a_pending_rollout_of_episodes_continues_exactly(tiny_model_dir, tmp_path):
    """Saved while step 2's episodes are being sampled: the checkpoint holds them (masks, messages,
    episode info), and the resumed run trains on them and ends on the clean run's weights."""
    from polyrl import checkpoint as ckpt

    def config(out: Path) -> RunConfig:
        return agent_config(tiny_model_dir, out, generation={"overlap": True}, train={"steps": 5})

    clean = Trainer(config(tmp_path / "clean"))
    clean_summary = clean.run(progress=False)

    interrupted = Trainer(config(tmp_path / "crash"))
    for _ in range(2):
        interrupted.history.append(interrupted.train_one_step())
        interrupted.step += 1
    saved = interrupted.save()
    interrupted.rollouts.close()
    pending = ckpt.read_state(saved)["pending_rollout"]
    assert pending["step"] == 2 and pending["policy_version"] == 1

    resumed = Trainer(config(tmp_path / "crash"))
    assert resumed.resume()
    rollout = resumed.rollouts.pending()
    assert rollout is not None and rollout.step == 2
    episodes = rollout.completions
    assert all(c.mask is not None and c.info["turns"] >= 1 for c in episodes)
    assert any(c.info["turns"] > 1 and (~c.mask).any() and c.messages for c in episodes)
    summary = resumed.run(progress=False)
    tail, expected = summary["history"][-3:], clean_summary["history"][2:]
    assert [m["step"] for m in tail] == [3, 4, 5]
    assert [m["policy_lag"] for m in tail] == [1, 1, 1]
    for key in ("reward_mean", "loss", "completion_len_mean", "tokens", "episode/turns_mean",
                "episode/sampled_token_share", "episode/env_error_share"):
        assert [m[key] for m in tail] == [m[key] for m in expected], key
    assert all(m["episode/turns_mean"] > 1 for m in tail)
    assert_same_weights(clean.train_engine.export_weights(), resumed.train_engine.export_weights())


# --- 7. a broken third-party environment -------------------------------------------------------------

#: The start of an environment module whose episodes count themselves (``next(_count)``), so
#: some of them can misbehave.
_COUNTING_ENV = '''
import itertools

from polyrl.agents import Observation

_count = itertools.count()
'''
BROKEN_ENV = _COUNTING_ENV + '''

class Flaky:
    """Every other episode's environment raises on its second step."""

    def __init__(self, options):
        self.broken = next(_count) % 2 == 1
        self.steps = 0

    def reset(self, row):
        return [{"role": "user", "content": "Say anything."}]

    def step(self, message):
        self.steps += 1
        if self.broken and self.steps == 2:
            raise RuntimeError("the environment's backend went away")
        return Observation([{"role": "user", "content": "Go on."}], reward=0.25)


def make(options):
    return Flaky(options)
'''


@pytest.mark.faults
def test_an_environment_that_raises_ends_its_episodes_and_the_run_finishes(tiny_model_dir, tmp_path):
    (tmp_path / "flaky_env.py").write_text(BROKEN_ENV)
    out = tmp_path / "run"
    config = agent_config(tiny_model_dir, out, environment={"name": f"{tmp_path / 'flaky_env.py'}:make",
                                                            "max_turns": 4}, train={"steps": 2})
    trainer = Trainer(config)
    rec = Recorder(trainer)
    scored: list[Any] = []
    score = trainer._score

    def recording_score(rows, completions):
        scored.append(score(rows, completions))
        return scored[-1]

    trainer._score = recording_score  # type: ignore[method-assign]
    summary = trainer.run(progress=False)
    assert summary["steps"] == 2
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:
        assert m["episode/env_error_share"] == pytest.approx(0.5)
        assert np.isfinite(m["loss"])
    for completions, result, batch in zip(rec.completions, scored, rec.batches, strict=True):
        failed = [c for c in completions if "env_error" in c.info]
        assert failed and all("went away" in c.info["env_error"] and c.info["turns"] == 2 for c in failed)
        # what was sampled before the failure is kept: two turns, the first one's feedback between
        assert all(len(runs_of(c.mask, True)) == 2 and len(runs_of(c.mask, False)) == 1 for c in failed)
        # ...but not trained, for or against: unscored (once: `environment` gave it 0, and its
        # group's advantages pushed the model away from it), out of the batch and the baseline
        ended = np.array(["env_error" in c.info for c in completions])
        assert np.isnan(result.total[ended]).all() and np.isfinite(result.total[~ended]).all()
        assert np.isnan(result.per_reward["environment"][ended]).all()
        assert len(batch.sequences) == int((~ended).sum())


@pytest.mark.faults
def test_an_episode_its_environment_ended_stays_out_of_the_loss_with_an_entropy_bonus_and_kl_term(tiny_model_dir,
                                                                                               tmp_path):
    """An episode no reward scored stays in the loss at advantage 0 for a KL term or entropy bonus
    (as TRL keeps it), but not one that ended in an environment error: its tokens stop where the
    environment broke (TRL's run stops there), so no term trains it."""
    (tmp_path / "flaky_env.py").write_text(BROKEN_ENV)
    out = tmp_path / "run"
    config = agent_config(tiny_model_dir, out, algorithm={"name": "grpo", "beta": 0.04, "entropy_coef": 0.05},
                          environment={"name": f"{tmp_path / 'flaky_env.py'}:make", "max_turns": 4})
    trainer = Trainer(config)
    rec = Recorder(trainer)
    assert trainer.run(progress=False)["steps"] == 1
    m = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    ended = np.array(["env_error" in c.info for c in rec.completions[0]])
    assert 0 < ended.sum() < len(ended)
    assert m["samples_kept"] == len(rec.batches[0].sequences) == int((~ended).sum())


NEVER_SCORES = "def never(prompts, completions, **kw):\n    return [None] * len(completions)\n"


@pytest.mark.faults
def test_an_episode_its_environment_ended_counts_in_no_divisor(tiny_model_dir, tmp_path):
    """Once: the loss divided by every row of the step, the failed episodes and their tokens
    included, though no term trains them (their tokens stop where the environment broke; TRL's
    run stops there), so each failure shrank the step by the failed share."""
    (tmp_path / "flaky_env.py").write_text(BROKEN_ENV)
    config = agent_config(tiny_model_dir, tmp_path / "run", environment={"name": f"{tmp_path / 'flaky_env.py'}:make",
                                                                         "max_turns": 4})
    trainer = Trainer(config)
    rec = Recorder(trainer, score_before=False)
    assert not trainer.train_one_step().get("skipped")
    completions = rec.completions[0]
    ended = np.array(["env_error" in c.info for c in completions])
    untruncated = config.algorithm.untruncated_mask([c.finish_reason for c in completions])
    assert 0 < ended.sum() < len(ended)
    batch = rec.batches[0]
    assert batch.normaliser_sequences == len(batch.sequences) == int((~ended).sum())
    assert batch.normaliser_tokens == sum(int(c.mask.sum()) for c, e, u in zip(completions, ended, untruncated)
                                          if u and not e)


@pytest.mark.faults
def test_an_idle_step_logs_the_entropy_of_the_episodes_its_environment_did_not_end(tiny_model_dir, tmp_path):
    """A step no reward scored trains nothing but logs TRL's entropy of its batch (the idle updates
    run over it). Once: that batch held the episodes that ended in an environment error too, so the
    logged entropy mixed in tokens no term trains."""
    (tmp_path / "flaky_env.py").write_text(BROKEN_ENV)
    (tmp_path / "never.py").write_text(NEVER_SCORES)
    config = agent_config(tiny_model_dir, tmp_path / "run", environment={"name": f"{tmp_path / 'flaky_env.py'}:make",
                                                                         "max_turns": 4})
    config = attrs.evolve(config, rewards=[RewardSection(function=f"{tmp_path / 'never.py'}:never")])
    trainer = Trainer(config)
    rec = Recorder(trainer, score_before=False)
    metrics = trainer.train_one_step()
    assert metrics["skipped"] and np.isfinite(metrics["entropy"])
    completions = rec.completions[0]
    ended = np.array(["env_error" in c.info for c in completions])
    untruncated = config.algorithm.untruncated_mask([c.finish_reason for c in completions])
    assert 0 < ended.sum() < len(ended)
    assert rec.batches and all(len(b.sequences) == int((untruncated & ~ended).sum()) for b in rec.batches)
    for seq in rec.batches[-1].sequences:
        assert "env_error" not in completion_for(seq, completions).info


# --- 4. MLX --------------------------------------------------------------------------------------------


def test_mlx_trains_episodes_with_masks_equal_to_the_reference(tiny_model_dir, tmp_path):
    """The same run on MLX (generate and train): sampled log-probs are the trainer's and the
    masked loss is the numpy reference's."""
    pytest.importorskip("mlx")
    trainer = Trainer(agent_config(tiny_model_dir, tmp_path / "run", backends={"train": "mlx"}))
    assert trainer.train_engine.backend == trainer.gen_engine.backend == "mlx"
    rec = Recorder(trainer)
    metrics = trainer.train_one_step()
    assert not metrics.get("skipped"), metrics
    assert metrics["episode/turns_mean"] > 1
    check_step_is_exact(rec, 0, file_decode(tiny_model_dir))


# --- 5. remote generation ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def push_server(tiny_model_dir, tmp_path_factory):
    """A real ``polyrl serve`` on 127.0.0.1 that accepts the trainer's weight pushes."""
    from serve_util import start_server

    token = tmp_path_factory.mktemp("secret") / "push-token"
    token.write_text("agent-test-" + "5c1e" * 8 + "\n")
    server = start_server(tiny_model_dir, "--allow-weight-push", "--weight-push-token-file", str(token))
    yield server, str(token)
    server.stop(graceful=False)  # a teardown (serve_util.ServerProcess.stop)


@pytest.mark.slow
def test_remote_generation_runs_episodes_from_the_train_engines_token_prompts(tiny_model_dir, tmp_path,
                                                                            push_server):
    """``backends.generate = "remote"``: the server has no chat encoder for the trainer, so every
    turn is a ``TokenPrompt`` built with the train engine's ``encode_chat``; the server generates
    from those ids verbatim, and its log-probs are the trainer's on the sampled tokens."""
    server, token = push_server
    trainer = Trainer(agent_config(tiny_model_dir, tmp_path / "run", backends={
        "train": "torch", "generate": "remote",
        "options": {"servers": [f"{server.url}/v1"], "weight_push_token_file": token}}))
    assert trainer.gen_engine.backend == "remote"
    assert trainer.gen_engine.encode_chat([{"role": "user", "content": "hi"}], None, True) is None
    sent: list[list[Any]] = []
    generate = trainer.gen_engine.generate

    def recording_generate(prompts, sampling):
        out = generate(prompts, sampling)
        sent.append(list(prompts))
        for c in out:  # what came back was generated from exactly the ids sent
            np.testing.assert_array_equal(c.prompt_ids, prompts[c.prompt_index].ids)
        return out

    trainer.gen_engine.generate = recording_generate
    trainer.episodes.generate = recording_generate
    rec = Recorder(trainer)
    metrics = trainer.train_one_step()
    assert not metrics.get("skipped"), metrics
    assert metrics["episode/turns_mean"] > 1 and len(sent) > 1  # later turns were generated remotely too
    assert all(isinstance(p, TokenPrompt) for prompts in sent for p in prompts)
    encode = trainer.train_engine.encode_chat
    for c in rec.completions[0]:
        first = as_messages(rec.rows[0][c.prompt_index]["prompt"])
        np.testing.assert_array_equal(c.prompt_ids, encode(first, None, True))
    check_step_is_exact(rec, 0, file_decode(tiny_model_dir))


# --- 6. torchrun data parallelism ------------------------------------------------------------------------


@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_two_ranks_train_masked_batches_as_one_process(tiny_model_dir, tmp_path):
    """A fixed batch with episode masks (token_mean: the normaliser is the global count of trained
    tokens, which the ranks hold unevenly): two gloo ranks give one process's losses and weights."""
    from test_distributed import SCRIPT, TORCHRUN, TWO_RANKS, _run

    assert TORCHRUN, "torchrun comes with torch"
    args = [str(SCRIPT), tiny_model_dir, "--aggregation", "token_mean", "--steps", "2"]
    single = _run([sys.executable, *args, "--masked", "--out", str(tmp_path / "one.json")], tmp_path / "one.json")
    double = _run([*TWO_RANKS, *args, "--masked", "--out", str(tmp_path / "two.json")], tmp_path / "two.json")
    unmasked = _run([sys.executable, *args, "--out", str(tmp_path / "all.json")], tmp_path / "all.json")
    assert double["world"] == 2
    np.testing.assert_allclose(double["losses"], single["losses"], rtol=1e-5, atol=1e-6)
    assert double["checksum"] == pytest.approx(single["checksum"], rel=1e-6)
    assert not np.allclose(single["losses"], unmasked["losses"])  # the masks did change the loss


@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_polyrl_launch_trains_episodes_on_two_ranks(tiny_model_dir, tmp_path):
    """``polyrl launch`` with an ``[environment]``: each rank runs its prompts' episodes, the step's
    metrics are the global batch's, and one process resumes the run."""
    from test_distributed import _metrics, _polyrl

    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\n'
        f'[generation]\ngroup_size = 4\nmax_new_tokens = 16\nstop = {json.dumps(STOPS)}\n'
        '[optimizer]\nlr = 1e-2\n[data]\ntask = "arithmetic"\n'
        '[[rewards]]\nname = "environment"\n'
        '[[rewards]]\nname = "length_penalty"\nweight = 0.5\noptions = { target = 2, unit = "chars" }\n'
        f'[environment]\nname = "guess_number"\nmax_turns = 3\nmax_episode_tokens = {MAX_EPISODE_TOKENS}\n'
        f'[train]\nsteps = 2\nprompts_per_step = 2\nthreads = 1\noutput_dir = "{out}"\n')
    _polyrl("launch", "--nproc-per-node", "2", str(config))
    lines = _metrics(out)
    assert [m["step"] for m in lines] == [1, 2]  # written once, by rank 0
    for m in lines:
        assert not m.get("skipped") and np.isfinite(m["loss"])
        assert m["samples_kept"] == 8  # the global batch: 2 prompts x 4, one prompt per rank
        assert m["episode/turns_mean"] > 1
    _polyrl("train", str(config), "--resume", "--steps", "3", "--no-progress")
    assert [m["step"] for m in _metrics(out)] == [1, 2, 3]


# --- the rest of a run: KL, several iterations, micro-batches, evaluation, logs, plain resume ----------


@pytest.mark.slow
def test_episodes_with_kl_iterations_micro_batches_eval_and_an_exact_resume(tiny_model_dir, tmp_path):
    """KL to the reference and ``num_iterations = 2`` (old log-probs re-scored on masked
    sequences), micro-batches of 2: every ``train_step`` call's loss is the masked reference's.
    Evaluation runs episodes scored by the environment's reward, the completions logs are written,
    and a run stopped after a checkpoint resumes to the uninterrupted run's metrics and weights."""

    def config(out: Path, steps: int) -> RunConfig:
        return agent_config(tiny_model_dir, out, algorithm={"name": "grpo", "num_iterations": 2, "beta": 0.05},
                            optimizer={"micro_batch_size": 2},
                            eval={"count": 2, "every": 2, "reward": "environment", "samples": 2},
                            train={"steps": steps, "checkpoint_every": 1})

    clean = Trainer(config(tmp_path / "clean", 3))
    rec = Recorder(clean)
    clean_summary = clean.run(progress=False)
    assert len(rec.batches) == 6  # 3 steps x 2 iterations
    for batch, current, objective, result in zip(rec.batches, rec.current, rec.objectives, rec.results):
        masks = [seq.loss_mask for seq in batch.sequences]
        assert batch.old_logprobs is not None and batch.ref_logprobs is not None
        expected, _ = policy_loss(current, batch.advantages, objective, batch.old_logprobs, batch.ref_logprobs,
                                  batch.sampler_logprobs, masks=masks)
        assert result.loss == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert any((~seq.loss_mask).any() for batch in rec.batches for seq in batch.sequences)
    assert clean_summary["eval_after"]["eval/count"] == 2
    evals = [json.loads(x) for x in (tmp_path / "clean" / "eval_completions.jsonl").read_text().splitlines()]
    assert {e["phase"] for e in evals} >= {"before", "after"} and all(e["reward"] in (0.0, 1.0) for e in evals)
    assert (tmp_path / "clean" / "completions.jsonl").stat().st_size > 0

    first = Trainer(config(tmp_path / "stopped", 2))
    first.run(progress=False)
    resumed = Trainer(config(tmp_path / "stopped", 3))
    assert resumed.resume()
    summary = resumed.run(progress=False)
    last, expected = summary["history"][-1], clean_summary["history"][-1]
    assert last["step"] == 3
    for key in ("reward_mean", "loss", "kl", "tokens", "episode/turns_mean", "episode/sampled_token_share"):
        assert last[key] == expected[key], key
    assert_same_weights(clean.train_engine.export_weights(), resumed.train_engine.export_weights())


RESET_FAILS_ENV = _COUNTING_ENV + '''

class ResetFails:
    """Every third episode's environment cannot start."""

    def __init__(self, options):
        self.broken = next(_count) % 3 == 1

    def reset(self, row):
        if self.broken:
            raise RuntimeError("no game today")
        return [{"role": "user", "content": "Say anything."}]

    def step(self, message):
        return Observation([{"role": "user", "content": "Go on."}], reward=0.25)


def make(options):
    return ResetFails(options)
'''


@pytest.mark.faults
@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_an_environment_that_cannot_reset_gives_empty_untrained_episodes(tiny_model_dir, tmp_path, backend):
    """A failed reset ends its episode before any turn: an empty completion in the batch, which
    both trainers take (it adds no token to the loss) while the other episodes train."""
    if backend == "mlx":
        pytest.importorskip("mlx")
    (tmp_path / "reset_env.py").write_text(RESET_FAILS_ENV)
    trainer = Trainer(agent_config(tiny_model_dir, tmp_path / "run", backends={"train": backend},
                                   environment={"name": f"{tmp_path / 'reset_env.py'}:make"}))
    rec = Recorder(trainer)
    metrics = trainer.train_one_step()
    assert not metrics.get("skipped") and np.isfinite(metrics["loss"])
    assert 0 < metrics["episode/env_error_share"] < 1
    empty = [c for c in rec.completions[0] if "env_error" in c.info]
    assert empty and all(len(c.completion_ids) == 0 and c.info["turns"] == 0 for c in empty)
    assert all("no game today" in c.info["env_error"] for c in empty)
    masks = [seq.loss_mask for seq in rec.batches[0].sequences]
    assert rec.results[0].tokens == sum(int(m.sum()) for m in masks) > 0


TRL_STYLE_REWARD = '''
import json, os

def first_turn_len(prompts, completions, **kwargs):
    """TRL's idiom: the first message of each conversation (an empty one raised IndexError)."""
    with open(os.environ["POLYRL_TEST_PROMPTS_SEEN"], "a") as fh:
        fh.write(json.dumps(prompts) + "\\n")
    return [float(len(c[0]["content"])) for c in completions]
'''

EDITING_ENV = '''
from polyrl.agents import Observation


class Editing:
    """Rewrites the message step() gets: the episode's record must not change with it."""

    def reset(self, row):
        return [{"role": "user", "content": "Say anything."}]

    def step(self, message):
        message["content"], message["role"] = "REWRITTEN BY ENV", "user"
        return Observation([], reward=0.1, done=True)


def make(options):
    return Editing()
'''


@pytest.mark.faults
def test_rewards_get_the_environments_prompt_and_never_an_episode_that_did_not_start(tiny_model_dir, tmp_path,
                                                                                        monkeypatch):
    """A TRL reward reading completion[0] used to stop the run on an episode whose reset failed
    (an empty conversation), blaming the reward; and every reward got the dataset's prompt, which
    the model never saw when the environment wrote its own. Now such episodes are unscored (the
    step trains on the rest) and the prompts are the environment's first messages."""
    (tmp_path / "reset_env.py").write_text(RESET_FAILS_ENV)
    (tmp_path / "trl_reward.py").write_text(TRL_STYLE_REWARD)
    seen = tmp_path / "prompts.jsonl"
    monkeypatch.setenv("POLYRL_TEST_PROMPTS_SEEN", str(seen))
    config = agent_config(tiny_model_dir, tmp_path / "run", environment={"name": f"{tmp_path / 'reset_env.py'}:make"})
    config = attrs.evolve(config, rewards=[RewardSection(function=f"{tmp_path / 'trl_reward.py'}:first_turn_len")])
    trainer = Trainer(config)
    rec = Recorder(trainer)
    metrics = trainer.run(progress=False)["history"][0]
    assert not metrics.get("skipped") and np.isfinite(metrics["loss"]) and np.isfinite(metrics["reward_mean"])
    completions = rec.completions[0]
    started = [c for c in completions if "env_error" not in c.info]
    assert 0 < len(started) < len(completions)
    prompts = [p for line in seen.read_text().splitlines() for p in json.loads(line)]
    assert len(prompts) == len(started)  # the empty episodes never reached the reward
    assert all(p == [{"role": "user", "content": "Say anything."}] for p in prompts)
    logged = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    assert logged and all(r["prompt"] == [{"role": "user", "content": "Say anything."}]
                          for r in logged if r["completion"]), logged[:2]


def test_an_environment_editing_the_message_it_gets_does_not_rewrite_the_episode(tiny_model_dir, tmp_path):
    (tmp_path / "editing_env.py").write_text(EDITING_ENV)
    trainer = Trainer(agent_config(tiny_model_dir, tmp_path / "run",
                                   environment={"name": f"{tmp_path / 'editing_env.py'}:make"}))
    rec = Recorder(trainer)
    trainer.train_one_step()
    for c in rec.completions[0]:
        assert c.messages and c.messages[0]["role"] == "assistant", c.messages
        assert c.messages[0]["content"] == c.text != "REWRITTEN BY ENV"


def test_a_resumed_pending_rollout_is_scored_against_the_environments_first_messages(tiny_model_dir, tmp_path,
                                                                                     monkeypatch):
    """Finding: a checkpoint's pending rollout lost each episode's ``prompt_messages``, so the
    resumed step's rewards (and the completions log) got the dataset row's prompt, a question the
    model was never asked."""
    (tmp_path / "editing_env.py").write_text(EDITING_ENV)  # reset asks "Say anything."
    (tmp_path / "trl_reward.py").write_text(TRL_STYLE_REWARD)
    seen = tmp_path / "prompts.jsonl"
    monkeypatch.setenv("POLYRL_TEST_PROMPTS_SEEN", str(seen))
    config = agent_config(tiny_model_dir, tmp_path / "run", environment={"name": f"{tmp_path / 'editing_env.py'}:make"},
                          generation={"overlap": True}, train={"steps": 2})
    config = attrs.evolve(config, rewards=[RewardSection(function=f"{tmp_path / 'trl_reward.py'}:first_turn_len")])
    asked = [{"role": "user", "content": "Say anything."}]
    interrupted = Trainer(config)
    interrupted.history.append(interrupted.train_one_step())
    interrupted.step += 1
    interrupted.save()  # step 1's episodes are pending: the checkpoint holds them
    interrupted.rollouts.close()
    seen.unlink()
    resumed = Trainer(config)
    assert resumed.resume()
    pending = resumed.rollouts.pending()
    assert pending is not None and pending.step == 1
    assert all(c.prompt_messages == asked for c in pending.completions)
    resumed.run(progress=False)
    prompts = [p for line in seen.read_text().splitlines() for p in json.loads(line)]
    assert prompts and all(p == asked for p in prompts), prompts[:2]
    logged = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    assert 2 in {r["step"] for r in logged} and all(r["prompt"] == asked for r in logged), logged[-1]


def test_environment_rewards_no_reward_reads_are_warned_about_once(tiny_model_dir, tmp_path):
    from structlog.testing import capture_logs

    (tmp_path / "editing_env.py").write_text(EDITING_ENV)  # rewards 0.1 a turn
    config = agent_config(tiny_model_dir, tmp_path / "run", environment={"name": f"{tmp_path / 'editing_env.py'}:make"},
                          train={"steps": 2})
    for rewards, warned in ((config.rewards, 0), (config.rewards[1:], 1)):  # with and without name = "environment"
        trainer = Trainer(attrs.evolve(config, rewards=rewards, train=attrs.evolve(config.train, keep_previous_runs=0)))
        with capture_logs() as logs:
            history = trainer.run(progress=False)["history"]
        assert all(m["episode/env_reward_mean"] == pytest.approx(0.1) for m in history)
        found = [e for e in logs if "no [[rewards]] entry reads them" in e["event"]]
        assert len(found) == warned and all('name = "environment"' in e["fix"] for e in found)


def test_remote_generation_with_overlap_trains_episodes_sampled_a_step_behind(tiny_model_dir, tmp_path,
                                                                              push_server):
    """Overlap with a remote generator: the next step's episodes are sampled on the server while
    this step trains; their ratio is to the server's own log-probs (policy lag 1)."""
    server, token = push_server
    out = tmp_path / "run"
    trainer = Trainer(agent_config(tiny_model_dir, out, generation={"overlap": True}, train={"steps": 3},
                                   backends={"train": "torch", "generate": "remote",
                                             "options": {"servers": [f"{server.url}/v1"],
                                                         "weight_push_token_file": token}}))
    rec = Recorder(trainer, score_before=False)
    summary = trainer.run(progress=False)
    history = summary["history"]
    assert [m["policy_lag"] for m in history] == [0, 1, 1]
    assert all(not m.get("skipped") and m["episode/turns_mean"] > 1 for m in history)
    for batch, completions in zip(rec.batches[1:], rec.completions[1:]):
        assert batch.old_logprobs is not None
        for seq, old in zip(batch.sequences, batch.old_logprobs):
            c = completion_for(seq, completions)
            np.testing.assert_array_equal(old, c.logprobs)
            np.testing.assert_array_equal(seq.loss_mask, c.mask)


def test_the_completions_log_shows_whole_episodes(tiny_model_dir, tmp_path):
    """completions.jsonl holds an episode's conversation, not only its last turn."""
    import json as _json

    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir, "max_length": 512},
        "generation": {"group_size": 2, "max_new_tokens": 6, "stop": ["a", "e", " "]},
        "data": {"task": "arithmetic", "options": {"count": 8}},
        "environment": {"name": "guess_number", "max_turns": 3, "max_episode_tokens": 120},
        "rewards": [{"name": "environment"}, {"name": "length_penalty", "options": {"target": 4}}],
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")},
        "logging": {"completions_per_step": 4},
        "eval": {"count": 2, "reward": "environment"},
    })
    summary = Trainer(config).run(progress=False)
    assert 0.0 <= summary["eval_after"]["eval/tool_call_share"] <= 1.0  # held-out episodes
    evals = [_json.loads(line) for line in (tmp_path / "run" / "eval_completions.jsonl").read_text().splitlines()]
    assert evals and all(isinstance(r["completion"], list) and "tool_calls" in r for r in evals)
    records = [_json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    assert records and all(isinstance(r["completion"], list) for r in records)
    assert any(len(r["completion"]) > 1 and r["completion"][1]["role"] == "user" for r in records)
    assert all(r["completion"][0]["role"] == "assistant" for r in records)
    line = _json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[1])  # after the eval line
    assert line["step"] == 1
    assert line["clip_ratio/region_mean"] == line["clip_fraction"]  # TRL's names for the clip regions
    assert line["clip_ratio/low_mean"] == line["clip_low_fraction"]
    assert line["clip_ratio/high_mean"] == line["clip_high_fraction"]


# --- 9. environment code that exits, hangs or always fails, under the real CLI ------------------------

FAULTY_ENV = '''
import itertools, os, sys, time
from pathlib import Path

from polyrl.agents import Observation

MODE = os.environ["POLYRL_TEST_ENV_MODE"]
_count = itertools.count()


class Faulty:
    """Every other episode's environment misbehaves in ``step`` (MODE says how)."""

    def __init__(self, options):
        self.broken = next(_count) % 2 == 1

    def reset(self, row):
        if MODE == "reset_raise":
            raise ValueError("reset boom")
        if MODE == "thread_left":  # a helper thread never stopped (an explicit daemon=False)
            import threading
            threading.Thread(target=time.sleep, args=(10**6,), name="env-helper", daemon=False).start()
        return [{"role": "user", "content": "Say anything."}]

    def step(self, message):
        if self.broken or MODE == "stuck_all":
            if MODE == "sys_exit":
                sys.exit(0)
            if MODE == "keyboard_interrupt":
                raise KeyboardInterrupt
            if MODE in ("stuck", "stuck_all"):
                Path(os.environ["POLYRL_TEST_REACHED"]).touch()
                time.sleep(10**6)
        return Observation([{"role": "user", "content": "Go on."}], reward=0.25)


def make(options):
    return Faulty(options)
'''


def faulty_env_run(tmp_path: Path, model: str, mode: str, steps: int, env_timeout_s: float = 60.0,
                   checkpoint_every: int = 0) -> tuple[Path, Path, dict[str, str]]:
    """A `polyrl train` config whose environment misbehaves as ``mode`` says."""
    import os

    (tmp_path / "faulty_env.py").write_text(FAULTY_ENV)
    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    # every first turn must end at a stop, never at max_new_tokens: an episode cut by length ends
    # before any `step`, so whether a misbehaving environment is reached would depend on which episode
    # the (thread-ordered) count marks broken. Any letter, digit or space stops the random model.
    stops = sorted(set(string.ascii_letters + string.digits + " "))
    config.write_text(
        f'[model]\npath = "{model}"\n[backends]\ntrain = "torch"\n'
        f'[generation]\ngroup_size = 2\nmax_new_tokens = 8\nstop = {json.dumps(stops)}\n'
        '[data]\ntask = "arithmetic"\n[[rewards]]\nname = "environment"\n'
        '[[rewards]]\nname = "length_penalty"\nweight = 0.5\noptions = {target = 2, unit = "chars"}\n'
        f'[environment]\nname = "{tmp_path / "faulty_env.py"}:make"\nmax_turns = 3\nmax_episode_tokens = 64\n'
        f'env_timeout_s = {env_timeout_s}\n'
        f'[train]\nsteps = {steps}\nprompts_per_step = 2\nthreads = 1\ncheckpoint_every = {checkpoint_every}\n'
        f'output_dir = "{out}"\n')
    env = {**os.environ, "POLYRL_TEST_ENV_MODE": mode, "POLYRL_TEST_REACHED": str(tmp_path / "reached")}
    return config, out, env


def train_in_this_process(capfd: Any, monkeypatch: Any, config: Path, env: dict[str, str]) -> Any:
    """``polyrl train`` through ``polyrl.cli.main`` in this process, ``env``'s test variables set
    (``crash_util.train_here``): the runs whose point is not the process itself spare a fresh
    interpreter's torch and transformers imports."""
    from crash_util import train_here

    for name in ("POLYRL_TEST_ENV_MODE", "POLYRL_TEST_REACHED"):
        monkeypatch.setenv(name, env[name])
    return train_here(capfd, config)


@pytest.mark.faults
@pytest.mark.parametrize("mode", ["sys_exit", "keyboard_interrupt", "stuck"])
def test_environment_code_that_exits_or_hangs_ends_its_episodes_and_the_cli_run_finishes(tiny_model_dir, tmp_path,
                                                                                      mode, capfd, monkeypatch):
    """sys.exit (once: a traceback and exit code 0 with nothing saved), KeyboardInterrupt, and a
    step that never returns (once: a run that hung for good): each ends its episode, recorded,
    and the run trains to the end and exits 0. The step that never returns runs in a subprocess (a
    hang is then its timeout, and its sleeping thread is not this process's); the others in this one."""
    import subprocess

    from crash_util import POLYRL, metric_steps

    config, out, env = faulty_env_run(tmp_path, tiny_model_dir, mode, steps=2, env_timeout_s=3)
    if mode == "stuck":
        proc = subprocess.run([*POLYRL, "train", str(config), "--no-progress"], capture_output=True, text=True,
                              env=env, timeout=400)
    else:
        proc = train_in_this_process(capfd, monkeypatch, config, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "error:" not in proc.stderr
    lines = metric_steps(out)
    assert [m["step"] for m in lines] == [1, 2]
    assert all(m["episode/env_error_share"] == pytest.approx(0.5) and not m.get("skipped") for m in lines)
    expected = {"sys_exit": "SystemExit(0)", "keyboard_interrupt": "KeyboardInterrupt",
                "stuck": "step did not return within 3 s"}[mode]
    assert expected in proc.stderr and "environment step failed; episode ended" in proc.stderr
    assert (out / "model").is_dir()


@pytest.mark.faults
@pytest.mark.slow
def test_a_thread_an_environment_leaves_running_does_not_keep_the_finished_cli_run_from_exiting(tiny_model_dir,
                                                                                                 tmp_path):
    """An environment whose ``reset`` starts a non-daemon thread that never ends: the run trained,
    wrote its model and printed its summary, then never exited (the interpreter's exit joins every
    such thread). It leaves now, exit 0, once its exit has waited ``EXIT_GRACE_S`` for them, with a
    warning naming them."""
    import subprocess

    from crash_util import POLYRL, metric_steps

    config, out, env = faulty_env_run(tmp_path, tiny_model_dir, "thread_left", steps=1)
    proc = subprocess.run([*POLYRL, "train", str(config), "--no-progress"], capture_output=True, text=True,
                          env=env, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["steps"] == 1
    assert [m["step"] for m in metric_steps(out)] == [1] and (out / "model").is_dir()
    warned = [line for line in proc.stderr.splitlines() if line.startswith("warning: the command ended")]
    assert len(warned) == 1 and "env-helper" in warned[0] and "daemon=True" in warned[0], proc.stderr[-2000:]


@pytest.mark.faults
def test_an_environment_that_fails_every_episode_skips_steps_then_stops_with_one_error(tiny_model_dir, tmp_path,
                                                                                      capfd, monkeypatch):
    """Once: `torch.cat(): expected a non-empty list of Tensors` from the backend. Now each such
    step is skipped (nothing reaches train_step, its metrics are written) and after a few in a row
    the run stops with one error naming the environment and what it raised, checkpointed."""
    from crash_util import metric_steps

    from polyrl.agents.episodes import MAX_FAILED_ROLLOUTS

    config, out, env = faulty_env_run(tmp_path, tiny_model_dir, "reset_raise", steps=10)
    proc = train_in_this_process(capfd, monkeypatch, config, env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "faulty_env.py:make" in errors[0] and "ValueError: reset boom" in errors[0]
    assert errors[0].count("Fix:") == 1
    lines = metric_steps(out)
    assert len(lines) == MAX_FAILED_ROLLOUTS
    assert all(m["skipped"] and m["episode/env_error_share"] == 1.0 for m in lines)
    assert "every episode of this rollout ended in an environment error" in proc.stderr
    assert (out / "checkpoints" / f"step-{MAX_FAILED_ROLLOUTS:08d}" / "COMPLETE").exists()


SPLIT_ENV = '''
from polyrl.agents import Observation


class Split:
    """Broken on every training row, working on every eval row."""

    def reset(self, row):
        if row["split"] == "train":
            raise RuntimeError("broken on training rows")
        return [{"role": "user", "content": row["prompt"]}]

    def step(self, message):
        return Observation([], reward=1.0, done=True)


def make(options):
    return Split()
'''


@pytest.mark.faults
def test_evaluation_episodes_leave_the_training_failure_streak_alone(tiny_model_dir, tmp_path):
    """Once: each eval pass the environment handled reset the streak of training rollouts whose every
    episode failed, so a run whose environment never worked on training rows went on until an error
    blaming the reward (3 steps no reward scored) instead of the one naming the environment."""
    from polyrl.agents.episodes import MAX_FAILED_ROLLOUTS, EnvironmentFailed

    (tmp_path / "split_env.py").write_text(SPLIT_ENV)
    for split in ("train", "eval"):
        (tmp_path / f"{split}.jsonl").write_text("".join(
            json.dumps({"prompt": f"{split} q{i}", "answer": "1", "split": split}) + "\n" for i in range(8)))
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir, "max_length": 512},
        "generation": {"group_size": 2, "max_new_tokens": 4},
        "data": {"path": str(tmp_path / "train.jsonl"), "eval_path": str(tmp_path / "eval.jsonl")},
        "eval": {"count": 2, "every": 1, "reward": "environment"},
        "rewards": [{"name": "environment"}],
        "environment": {"name": f"{tmp_path / 'split_env.py'}:make", "max_turns": 2, "max_episode_tokens": 32},
        "train": {"steps": 6, "prompts_per_step": 1, "threads": 1, "output_dir": str(tmp_path / "run")},
    })
    trainer = Trainer(config)
    with pytest.raises(EnvironmentFailed, match="RuntimeError: broken on training rows"):
        trainer.run(progress=False)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len([m for m in lines if "episode/env_error_share" in m]) == MAX_FAILED_ROLLOUTS
    # every evaluation scored its episodes (an episode whose reset failed is unscored: null), before
    # training and after each step (this read eval_accuracy, a name the lines never had)
    evaluated = [m for m in lines if "eval/accuracy" in m]
    assert [m["step"] for m in evaluated] == [0, 1, 2, 3] and all(m["eval/accuracy"] is not None for m in evaluated)


@pytest.mark.faults
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
@pytest.mark.slow
def test_a_real_stop_signal_while_an_environment_step_hangs_stops_the_run_gracefully(tiny_model_dir, tmp_path,
                                                                                    signame):
    """A real SIGTERM / Ctrl-C is the trainer's, never mistaken for the environment's: the stuck
    step is abandoned at env_timeout_s, the step finishes, is checkpointed, and the run exits 0."""
    import signal
    import subprocess

    from crash_util import POLYRL, metric_steps, signal_when_reached

    config, out, env = faulty_env_run(tmp_path, tiny_model_dir, "stuck_all", steps=1000, env_timeout_s=4)
    proc = subprocess.Popen([*POLYRL, "train", str(config), "--no-progress"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    stderr, seconds = signal_when_reached(proc, tmp_path / "reached", getattr(signal, signame))
    assert proc.returncode == 0, stderr[-3000:]
    assert seconds < 60
    assert "stop requested; finishing the current step" in stderr and "Traceback" not in stderr
    assert "step did not return within 4 s" in stderr
    assert [m["step"] for m in metric_steps(out)] == [1]
    assert (out / "checkpoints" / "step-00000001" / "COMPLETE").exists()


def test_an_evaluation_of_sampled_episodes_only_logs_their_tool_call_share(tiny_model_dir, tmp_path):
    """eval.greedy = false (TRL's evaluation) with an environment: eval/tool_call_share is the sampled
    episodes' share (it counted greedy episodes only, so it was left out), scored with the run's rewards."""
    import json as _json

    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir, "max_length": 512},
        "generation": {"group_size": 2, "max_new_tokens": 6, "stop": ["a", "e", " "]},
        "data": {"task": "arithmetic", "options": {"count": 8}},
        "environment": {"name": "guess_number", "max_turns": 3, "max_episode_tokens": 120},
        "rewards": [{"name": "environment"}, {"name": "length_penalty", "weight": 0.5, "options": {"target": 4}}],
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")},
        "eval": {"count": 2, "reward": "run", "greedy": False, "samples": 2, "before": False},
    })
    summary = Trainer(config).run(progress=False)
    evals = [_json.loads(line) for line in (tmp_path / "run" / "eval_completions.jsonl").read_text().splitlines()]
    assert len(evals) == 4 and not any(r["greedy"] for r in evals)
    assert summary["eval_after"]["eval/tool_call_share"] == sum(r["tool_calls"] > 0 for r in evals) / 4
    assert all(set(r["rewards"]) == {"environment", "length_penalty"} for r in evals)


# --- an episode out of memory keeps the last step trained -------------------------------------------------


@pytest.mark.faults
@pytest.mark.parametrize("overlap", [False, True], ids=["in-step", "sampled-ahead"])
def test_an_episode_out_of_memory_checkpoints_the_last_step_trained_and_says_where_resume_starts(
        tiny_model_dir, tmp_path, overlap):
    """An OutOfMemory in an episode (its chat template's rendering, here step 2's) stopped the run
    with every step since the last checkpoint lost (all of them with checkpoint_every = 0), while
    its message promised "a training run continues from its last checkpoint". The last step trained
    is checkpointed now, the prompt sampler set back before step 2's rows (sampled in the step, or
    ahead during step 1), and the message says where ``--resume`` continues; the resumed run samples
    step 2 from the very rows the failed one drew. The MemoryError is raised into the real episode
    glue by the encoder: a real one cannot be made to land in a trainer's rendering reliably."""
    from polyrl import checkpoint as ckpt
    from polyrl.errors import OutOfMemory

    out = tmp_path / "run"
    config = agent_config(tiny_model_dir, out, generation={"overlap": overlap},
                          train={"steps": 3, "checkpoint_every": 0})
    trainer = Trainer(config)
    drawn: list[list[dict[str, Any]]] = []
    sample, encode = trainer._sample, trainer.episodes.glue._encode

    def drawing_sample(rows, sampling, **kwargs):
        drawn.append(list(rows))
        return sample(rows, sampling, **kwargs)

    def short_of_memory(messages, tools, add_generation_prompt):
        if len(drawn) == 2 and any(m["role"] == "assistant" for m in messages):  # step 2's second turn
            raise MemoryError
        return encode(messages, tools, add_generation_prompt)

    trainer._sample = drawing_sample  # type: ignore[method-assign]
    trainer.episodes.glue._encode = short_of_memory
    with pytest.raises(OutOfMemory) as raised:
        trainer.run(progress=False)
    saved = ckpt.checkpoint_dir(out / "checkpoints", 1)
    assert str(raised.value).startswith("out of memory while a conversation")
    assert f"step 1 is checkpointed in {saved}: `polyrl train CONFIG --resume` continues with step 2" in str(
        raised.value)
    assert (saved / "COMPLETE").exists() and ckpt.read_state(saved)["pending_rollout"] is None

    resumed = Trainer(config)
    again: list[list[dict[str, Any]]] = []
    resumed_sample = resumed._sample

    def resumed_drawing(rows, sampling, **kwargs):
        again.append(list(rows))
        return resumed_sample(rows, sampling, **kwargs)

    resumed._sample = resumed_drawing  # type: ignore[method-assign]
    assert resumed.resume()
    summary = resumed.run(progress=False)
    assert summary["steps"] == 3 and again[0] == drawn[1]


@pytest.mark.faults
def test_out_of_memory_during_an_update_saves_nothing_and_says_so(tiny_model_dir, tmp_path):
    """Out of memory once step 2's update began: the weights are neither step 1's nor step 2's, so
    no checkpoint of them is sound; nothing is saved, and the line says so and names the last
    checkpoint (here none) instead of promising a resume from it."""
    from polyrl import checkpoint as ckpt
    from polyrl.errors import OutOfMemory

    out = tmp_path / "run"
    trainer = Trainer(agent_config(tiny_model_dir, out, train={"steps": 3, "checkpoint_every": 0}))
    train_step = trainer.train_engine.train_step

    def short_of_memory(batch, objective):
        if trainer.step == 1:
            raise OutOfMemory("the torch backend ran its train_step hook")
        return train_step(batch, objective)

    trainer.train_engine.train_step = short_of_memory  # type: ignore[method-assign]
    with pytest.raises(OutOfMemory) as raised:
        trainer.run(progress=False)
    assert ("nothing was saved: step 2's update was under way, so the weights are neither step 1's nor step 2's; "
            "no checkpoint was written, so a run again starts from the start") in str(raised.value)
    assert "continues from its last checkpoint" not in str(raised.value)
    assert ckpt.latest_checkpoint(out / "checkpoints") is None


def test_a_runs_episodes_know_the_generators_end_of_sequence_ids(tiny_model_dir, tmp_path):
    """The glue keeps a sampled EOS as the turn's end (``ChatGlue._rest_of``) only when the runner
    knows which ids end a sequence: the generating engine's, wired in by the setup."""
    trainer = Trainer(agent_config(tiny_model_dir, tmp_path / "run"))
    assert trainer.episodes.eos_ids and trainer.episodes.eos_ids == trainer.gen_engine.raw.eos_ids
    # and the tokenizer's reading of an end marker whose token's text holds the EOS's (``<|im_end|>\n``
    # added as one token: backend_kit.eos_rest): the text after the EOS's, as its ids
    tok = trainer.gen_engine.raw.tokenizer
    eos, newline = tok.convert_tokens_to_ids("<|im_end|>"), tok("\n", add_special_tokens=False)["input_ids"]
    assert trainer.episodes.glue._eos_rest(eos, [eos, *newline]) == newline
