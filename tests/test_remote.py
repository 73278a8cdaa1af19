"""Backend ``remote``: two real `polyrl serve` processes on 127.0.0.1 feeding one torch trainer."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import numpy as np
import pytest

from polyrl.config import RunConfig
from polyrl.engine import Engine
from polyrl.errors import ConfigError, PluginError
from polyrl.registry import Registry
from polyrl.trainer import Trainer
from polyrl.types import EngineConfig, SamplingParams, TokenSequence

from serve_util import SERVED_NAME, start_server

pytest.importorskip("torch")

REWARD = """
def digits(prompts, completions, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]  # chat: TRL's messages
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]
"""


@pytest.fixture(scope="module")
def push_token_file(tmp_path_factory) -> str:
    """The weight-push shared secret, one file read by both the servers and the trainer's client."""
    path = tmp_path_factory.mktemp("secret") / "push-token"
    path.write_text("remote-test-" + "7f3a" * 8 + "\n")
    return str(path)


@pytest.fixture(scope="module")
def servers(tiny_model_dir, push_token_file):
    started = [start_server(tiny_model_dir, "--allow-weight-push", "--weight-push-token-file", push_token_file,
                            "--allow-fault-control") for _ in range(2)]
    yield started
    for s in started:
        s.stop()


def remote_config(servers, **options) -> EngineConfig:
    return EngineConfig(model="unused", role="generate",
                        options={"servers": [f"{s.url}/v1" for s in servers], **options})


def test_rollouts_are_spread_over_servers_with_exact_ids_and_logprobs(servers, tiny_model_dir):
    for s in servers:
        s.reset()
    reg = Registry()
    remote = Engine(reg, "remote", remote_config(servers))
    assert remote.raw.model == SERVED_NAME  # discovered through /v1/models
    prompts = [[{"role": "user", "content": f"Count to {i}"}] for i in range(6)]
    out = remote.generate(prompts, SamplingParams(max_new_tokens=6, n=3, seed=5, temperature=1.0))
    assert len(out) == 18 and [c.prompt_index for c in out] == [i for i in range(6) for _ in range(3)]
    assert all(s.stats()["requests"] >= 2 for s in servers)  # both servers did work
    # the ids and log-probs are the generator's: a local torch engine on the same weights agrees
    local = Engine(reg, "torch", EngineConfig(model=tiny_model_dir, role="reference", threads=1))
    scored = local.logprobs([TokenSequence.of(c) for c in out], 1.0)
    for c, lp in zip(out, scored):
        np.testing.assert_allclose(c.logprobs, lp, atol=1e-4)


@pytest.mark.parametrize("overlap", [False, True], ids=["inline", "overlap"])
def test_trainer_pushes_weights_to_every_server_each_step(servers, tiny_model_dir, tmp_path, overlap,
                                                          push_token_file):
    for s in servers:
        s.reset()
    (tmp_path / "reward.py").write_text(REWARD)
    before = [s.stats()["weight_version"] for s in servers]
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir},
        "backends": {"train": "torch", "generate": "remote",
                     "options": {"servers": [f"{s.url}/v1" for s in servers],
                                 "weight_push_token_file": push_token_file}},
        "generation": {"group_size": 4, "max_new_tokens": 8, "overlap": overlap},
        "optimizer": {"lr": 1e-3},
        "data": {"task": "arithmetic"},
        "rewards": [{"function": f"{tmp_path / 'reward.py'}:digits"}],
        "train": {"steps": 3, "prompts_per_step": 4, "threads": 1, "output_dir": str(tmp_path / "run")},
    })
    trainer = Trainer(config)
    summary = trainer.run(progress=False)
    assert summary["steps"] == 3
    after = [s.stats() for s in servers]
    # four pushes on every server: one when the run starts, then inline: after each step; with
    # overlap: before sampling steps 1 and 2 (the servers are idle only then) and at the end
    assert [a["weight_version"] - b for a, b in zip(after, before)] == [4, 4]
    assert all(a["requests"] > 0 for a in after)
    # the run ends with the servers on the trained policy
    prompt = [[{"role": "user", "content": "Count to 3"}]]
    remote = trainer.gen_engine.generate(prompt, SamplingParams(max_new_tokens=6, n=2, seed=1))
    trained = trainer.train_engine.logprobs([TokenSequence.of(c) for c in remote], 1.0)
    for c, lp in zip(remote, trained):
        np.testing.assert_allclose(c.logprobs, lp, atol=1e-4)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["policy_lag"] for m in metrics] == ([0, 1, 1] if overlap else [0, 0, 0])
    pushed_in_step = metrics[1:] if overlap else metrics  # overlap's step 0 samples the initial weights
    assert all(m["time/sync"] > 0 for m in pushed_in_step)
    # only the latest weights stay on disk, and the temporary folder goes with the engine
    folder = trainer.gen_engine.raw.weights_dir()
    assert [p.name for p in Path(folder).iterdir()] == ["policy-00000004.safetensors"]
    trainer.gen_engine.raw.close()
    assert not Path(folder).exists()


def test_a_dead_server_fails_over_to_the_other(servers, tiny_model_dir):
    reg = Registry()
    dead = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    engine = Engine(reg, "remote", EngineConfig(model="x", options={
        "servers": [dead, f"{servers[0].url}/v1"], "served_model": SERVED_NAME, "backoff_s": 0.01}))
    out = engine.generate([[{"role": "user", "content": "Hi"}]] * 4, SamplingParams(max_new_tokens=3, n=2, seed=0))
    assert len(out) == 8


def test_errors_name_the_option_and_the_fix(servers):
    reg = Registry()
    with pytest.raises(ConfigError, match="backends.options.servers"):
        Engine(reg, "remote", EngineConfig(model="x", options={}))
    with pytest.raises(ConfigError, match="cannot list the models"):
        Engine(reg, "remote", EngineConfig(model="x", options={"servers": ["http://127.0.0.1:9/v1"]}))
    engine = Engine(reg, "remote", EngineConfig(model="x", options={
        "servers": ["http://127.0.0.1:9/v1"], "served_model": "m", "retries": 1, "backoff_s": 0.01}))
    with pytest.raises(PluginError, match="servers in backends.options.servers are up"):
        engine.generate(["hi"], SamplingParams(max_new_tokens=2))


@pytest.mark.faults
def test_a_weight_push_without_the_token_is_refused_with_the_fix(servers, monkeypatch):
    reg = Registry()
    weights = {"unused": np.zeros(1, np.float32)}
    before = servers[0].stats()["weight_version"]
    tokenless = Engine(reg, "remote", remote_config(servers[:1], served_model=SERVED_NAME))
    with pytest.raises(PluginError, match="weight_push_token_env"):
        tokenless.import_weights(weights)
    monkeypatch.setenv("POLYRL_TEST_WRONG_TOKEN", "not-the-token")
    wrong = Engine(reg, "remote", remote_config(servers[:1], served_model=SERVED_NAME,
                                                weight_push_token_env="POLYRL_TEST_WRONG_TOKEN"))
    with pytest.raises(PluginError, match="HTTP 403"):
        wrong.import_weights(weights)
    assert servers[0].stats()["weight_version"] == before  # nothing was loaded
    # the refused weights were written to a temporary folder; it goes when the engine does
    folders = [Path(e.raw.weights_dir()) for e in (tokenless, wrong)]
    assert all(f.is_dir() and f.name.startswith("polyrl-weights-") for f in folders)
    del tokenless, wrong
    gc.collect()
    assert not any(f.exists() for f in folders)
    with pytest.raises(ConfigError, match="backends.options.weight_push_token_env"):
        Engine(reg, "remote", remote_config(servers[:1], served_model=SERVED_NAME,
                                            weight_push_token_env="POLYRL_TEST_UNSET_TOKEN_VAR"))
