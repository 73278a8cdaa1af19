"""``device = "auto"`` (the default): the backend's accelerator when there is one, else the CPU.

A recipe written on a laptop must use the GPU of an NVIDIA box without an edit, and the reverse;
a device that cannot be used is an ``error:`` naming the field and the fix.
"""

from __future__ import annotations

import pytest

from polyrl.config import ModelSection
from polyrl.errors import ConfigError, RewardError
from polyrl.types import EngineConfig

torch = pytest.importorskip("torch", reason="needs the torch backend (pip install 'polyrl[torch]')")


def test_the_default_device_is_auto_in_the_config_and_the_engine_config():
    assert ModelSection(path="x").device == "auto"
    assert EngineConfig(model="x").device == "auto"


def test_auto_is_cuda_when_torch_sees_a_gpu_and_the_cpu_otherwise(monkeypatch):
    from polyrl_torch.devices import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto").type == "cuda"


def test_cuda_asked_for_where_there_is_none_names_the_fix(monkeypatch):
    from polyrl_torch.devices import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="no CUDA device"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="auto, cpu, cuda"):
        resolve_device("gpu-please")


def test_an_auto_engine_on_this_machine_runs_where_torch_says(tiny_model_dir):
    from polyrl.engine import Engine
    from polyrl.registry import get_registry

    engine = Engine(get_registry(), "torch", EngineConfig(model=tiny_model_dir, role="generate"))
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert engine.raw.device.type == expected


def test_the_reward_model_device_resolves_the_same_way(monkeypatch):
    from polyrl_torch.reward_model import DEFAULTS, torch_device

    assert DEFAULTS["device"] == "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert torch_device("auto") == torch.device("cpu")
    with pytest.raises(RewardError, match='options.device = "auto" or "cpu"'):
        torch_device("cuda")
    with pytest.raises(RewardError, match="unknown device 'tpu-ish'"):
        torch_device("tpu-ish")


def test_more_torchrun_ranks_than_gpus_is_an_error_naming_the_fix(monkeypatch):
    from polyrl_torch import distributed

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match="local rank 1.*1 CUDA GPU") as err:
        distributed.local_device(torch.device("cuda"))
    assert "--nproc-per-node" in str(err.value.fix) and 'model.device = "cpu"' in str(err.value.fix)


def test_only_a_launcher_makes_a_single_process_a_rank(monkeypatch):
    from polyrl_torch import distributed

    for name in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert not distributed.launched()
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert not distributed.launched()  # no rendezvous port: a stray variable, not torchrun
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert distributed.launched()
    monkeypatch.delenv("MASTER_ADDR")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert distributed.launched()  # a larger world always joins (and says so if it cannot)
