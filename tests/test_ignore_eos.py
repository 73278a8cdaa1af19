"""``ignore_eos`` across the generators (issue 20: fixed completion lengths for benchmarks).

Every backend honours every ``SamplingParams`` field or refuses it up front: a run asking a
backend that does not declare ``ignore_eos`` is refused before any model loads, ``polyrl serve``
takes the field only as a JSON boolean, and the ``remote`` backend sends it to a real
``polyrl serve`` on 127.0.0.1 (torch, the tiny model). The backends' own sampling is checked by
the conformance kit (``test_ignore_eos_samples_on_to_max_new_tokens``).
"""

from __future__ import annotations

from types import SimpleNamespace

import attrs
import pytest

from polyrl.backend_features import check_backend_features, refuse_unsupported_sampling
from polyrl.config import RunConfig
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import Registry, get_registry
from polyrl.types import Capabilities, EngineConfig, SamplingParams


BASE = {"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]}
CHATS = [[{"role": "user", "content": "Count to five."}], [{"role": "user", "content": "Name a colour."}]]


class OneBackendRegistry:
    """A registry holding one backend with the given capabilities (the core check reads only these)."""

    def __init__(self, capabilities: Capabilities) -> None:
        self.capabilities = capabilities

    def spec(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(capabilities=self.capabilities)


def test_the_config_field_reaches_sampling_params():
    config = RunConfig.from_dict({**BASE, "generation": {"ignore_eos": True}})
    assert config.generation.sampling(seed=1).ignore_eos is True
    assert RunConfig.from_dict(BASE).generation.sampling(seed=1).ignore_eos is False


@pytest.mark.faults
def test_a_generate_backend_not_declaring_ignore_eos_is_refused_up_front():
    asking = RunConfig.from_dict({**BASE, "backends": {"train": "torch", "generate": "plain"},
                                  "generation": {"ignore_eos": True}})
    plain = OneBackendRegistry(Capabilities(generate=True, sampling=("min_p",)))
    with pytest.raises(ConfigError) as info:
        check_backend_features(asking, plain)
    assert info.value.field == "generation.ignore_eos"
    assert "'plain'" in str(info.value) and "generation.ignore_eos = false" in str(info.value)
    check_backend_features(RunConfig.from_dict(BASE), plain)  # not asked for: nothing to refuse
    check_backend_features(asking, OneBackendRegistry(Capabilities(generate=True, sampling=("ignore_eos",))))


@pytest.mark.faults
def test_the_python_api_refuses_ignore_eos_on_a_backend_without_it_before_training(toy, tmp_path):
    """The toy backend (``toy`` fixture, a real entry-point plugin) does not declare ``ignore_eos``."""
    from polyrl import api

    with pytest.raises(ConfigError) as info:
        api.run(api.grpo, policy=api.Agent("toy-model", backend="toy"), prompts=["p0", "p1"],
                rewards=["toy_sevens"], generation_config=api.GenerationConfig(max_new_tokens=4, ignore_eos=True),
                grpo_config=api.GRPOConfig(steps=1, output_dir=str(tmp_path / "api")), progress=False)
    assert info.value.field == "generation.ignore_eos" and "'toy'" in str(info.value)
    assert not (tmp_path / "api" / "metrics.jsonl").exists()  # refused before any step ran


@pytest.mark.faults
def test_a_backend_generate_refuses_ignore_eos_it_does_not_declare():
    with pytest.raises(ConfigError) as info:
        refuse_unsupported_sampling(SamplingParams(ignore_eos=True), "plain", ("min_p",))
    assert info.value.field == "generation.ignore_eos" and "ignore_eos = false" in str(info.value)
    refuse_unsupported_sampling(SamplingParams(ignore_eos=True), "plain", ("ignore_eos",))


def test_every_installed_generator_declares_ignore_eos():
    """torch, MLX and MAX sample past EOS themselves; remote sends the field to its servers."""
    reg = get_registry()
    for name in ("torch", "mlx", "max", "remote"):
        if name in reg.names():
            assert "ignore_eos" in reg.spec(name).capabilities.sampling, name


@pytest.mark.faults
@pytest.mark.parametrize("bad", ["true", 1, 0, [True], {"value": True}], ids=["string", "one", "zero", "list", "object"])
def test_serve_answers_400_to_a_non_boolean_ignore_eos(judge_server, bad):
    judge_server.reset()
    r = judge_server.post("/v1/completions", json={"prompt": "Count:", "max_tokens": 2, "ignore_eos": bad})
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["param"] == "ignore_eos" and "JSON boolean" in error["message"]


def test_serve_runs_every_completion_to_max_tokens_with_ignore_eos(judge_server):
    """Seeded completions of which some end on EOS; with ``ignore_eos`` every one runs to
    ``max_tokens`` (finish "length") and starts with the ids it had before."""
    judge_server.reset()
    body = {"prompt": "Count:", "max_tokens": 48, "n": 64, "seed": 5, "temperature": 1.5, "return_token_ids": True}
    stopped = judge_server.post("/v1/completions", json=body).json()["choices"]
    assert any(c["finish_reason"] == "stop" for c in stopped), "no EOS in the seeded draws: nothing to check"
    full = judge_server.post("/v1/completions", json={**body, "ignore_eos": True}).json()["choices"]
    for s, f in zip(stopped, full):
        assert f["finish_reason"] == "length" and len(f["token_ids"]) == 48
        assert f["token_ids"][: len(s["token_ids"])] == s["token_ids"]
    null = judge_server.post("/v1/completions", json={**body, "ignore_eos": None}).json()["choices"]
    assert [c["token_ids"] for c in null] == [c["token_ids"] for c in stopped]  # null: the default


def test_remote_sends_ignore_eos_and_gets_max_new_tokens_from_a_real_server(judge_server):
    judge_server.reset()
    registry = Registry()
    engine = Engine(registry, "remote", EngineConfig(model="unused", role="generate",
                                                     options={"servers": [judge_server.base_url]}))
    stopping = SamplingParams(max_new_tokens=48, n=64, seed=5, temperature=1.5)
    stopped = engine.generate(CHATS, stopping)
    early = [i for i, c in enumerate(stopped) if c.finish_reason == "stop"]
    assert early, "no EOS in the seeded draws: nothing to check"
    full = engine.generate(CHATS, attrs.evolve(stopping, ignore_eos=True))
    assert [c.prompt_index for c in full] == [c.prompt_index for c in stopped]
    for s, f in zip(stopped, full):
        assert f.finish_reason == "length"
        assert len(f.completion_ids) == len(f.logprobs) == 48
        assert f.completion_ids[: len(s.completion_ids)].tolist() == s.completion_ids.tolist()
