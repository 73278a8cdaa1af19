"""A TRL user's own model folder on the torch backend: the folders transformers cannot load as a
plain model (a peft adapter, custom modelling code, a pickled checkpoint with more than tensors)
are one ``error:`` naming the field and the fix that loads them; the fix named works.

Real transformers / peft / torch objects saved to disk, no hub (tiny random Llama configs).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, LoraConfig, SamplingParams

torch = pytest.importorskip("torch")
pytest.importorskip("polyrl_torch")


def _engine(path: Path | str, **kwargs) -> Engine:
    return Engine(get_registry(), "torch", EngineConfig(model=str(path), role="train", threads=1, **kwargs))


def _copy(tiny_model_dir: str, dst: Path) -> Path:
    shutil.copytree(tiny_model_dir, dst)
    return dst


def _one_line(err: ConfigError) -> str:
    text = str(err)
    assert "\n" not in text, text
    return text


def test_a_peft_adapter_folder_given_as_the_model_names_its_base_and_the_option_that_loads_it(tiny_model_dir,
                                                                                              tmp_path):
    """``adapter_config.json`` without ``config.json``: the adapter of a model (peft's folder), which
    read as "has no config.json ... set backends.options.gguf_file". The refusal names the base model
    and ``initial_adapter`` with the adapter's r / alpha / layers, and that fix trains on from it."""
    import peft
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = peft.get_peft_model(base, peft.LoraConfig(r=2, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                      task_type="CAUSAL_LM"))
    adapter = tmp_path / "my-adapter"
    model.save_pretrained(adapter)
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "config.json").exists()

    with pytest.raises(ConfigError) as err:
        _engine(adapter)
    text = _one_line(err.value)
    assert err.value.field == "model.path"
    assert "peft adapter folder" in text and repr(tiny_model_dir) in text
    assert "backends.options.initial_adapter" in text and 'rank = 2, alpha = 8' in text
    assert 'target_modules = ["q_proj", "v_proj"]' in text

    # the fix as the error words it: the base model, the adapter as initial_adapter, [lora] as named
    engine = _engine(tiny_model_dir, lora=LoraConfig(rank=2, alpha=8, target_modules=("q_proj", "v_proj")),
                     options={"initial_adapter": str(adapter)})
    assert engine.generate(["Hello"], SamplingParams(max_new_tokens=2, seed=0))[0].completion_ids.size == 2


def test_a_folder_of_custom_modelling_code_names_trust_remote_code_and_its_files(tiny_model_dir, tmp_path,
                                                                                 monkeypatch):
    """``auto_map`` naming the folder's own Python: transformers' refusal was a multi-line plea to pass
    ``trust_remote_code=True`` with a ``https://hf.co//tmp/...`` link, under the fix "point model.path
    at a Hugging Face model folder". Now one line on ``model.trust_remote_code`` naming the files; the
    code never ran; with the option set, the folder loads."""
    import transformers.dynamic_module_utils as dynamic

    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    folder = _copy(tiny_model_dir, tmp_path / "custom")
    marker = tmp_path / "code-ran"
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="polyrl_custom_llama", architectures=["CustomLlama"],
                  auto_map={"AutoConfig": "configuration_custom.CustomConfig",
                            "AutoModelForCausalLM": "modeling_custom.CustomLlama"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_custom.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import LlamaConfig\n\n"
        "class CustomConfig(LlamaConfig):\n    model_type = 'polyrl_custom_llama'\n")
    (folder / "modeling_custom.py").write_text(
        "from transformers import LlamaForCausalLM\n"
        "from .configuration_custom import CustomConfig\n\n"
        "class CustomLlama(LlamaForCausalLM):\n    config_class = CustomConfig\n")

    with pytest.raises(ConfigError) as err:
        _engine(folder)
    text = _one_line(err.value)
    assert err.value.field == "model.trust_remote_code"
    assert "configuration_custom.py, modeling_custom.py" in text and "hf.co" not in text
    assert "model.trust_remote_code = true" in text
    assert not marker.exists()

    engine = _engine(folder, trust_remote_code=True)
    assert marker.exists() and type(engine.raw.causal_lm).__name__ == "CustomLlama"


class _RunsCode:
    """A pickled object that runs code when unpickled (what ``weights_only=True`` refuses)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


def _bin_folder(tiny_model_dir: str, dst: Path, extra: dict | None = None) -> Path:
    from safetensors.torch import load_file

    folder = _copy(tiny_model_dir, dst)
    tensors = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    torch.save({**tensors, **(extra or {})}, folder / "pytorch_model.bin")
    return folder


def test_a_pickled_bin_checkpoint_holding_code_is_one_error_on_model_path(tiny_model_dir, tmp_path):
    """A ``pytorch_model.bin`` with a Python object beside its tensors: torch's ``weights_only`` load
    refused it (nothing ran), but the run ended as a plugin crash quoting torch's advice to
    allowlist the object's globals. Now one ``error:`` on ``model.path`` naming the file."""
    marker = tmp_path / "code-ran"
    folder = _bin_folder(tiny_model_dir, tmp_path / "pickled", {"payload": _RunsCode(marker)})
    with pytest.raises(ConfigError) as err:
        _engine(folder)
    text = _one_line(err.value)
    assert err.value.field == "model.path"
    assert "pytorch_model.bin" in text and "weights_only=True" in text and "safetensors" in text
    assert not marker.exists()


def test_a_plain_bin_only_checkpoint_loads_the_same_model(tiny_model_dir, tmp_path):
    """Tensors alone in ``pytorch_model.bin`` (no safetensors): loaded, the same logits."""
    folder = _bin_folder(tiny_model_dir, tmp_path / "bin-only")
    ids = torch.tensor([[0, 75, 76, 80]])
    with torch.no_grad():
        got = _engine(folder).raw.model(ids).logits
        want = _engine(tiny_model_dir).raw.model(ids).logits
    assert torch.equal(got, want)
