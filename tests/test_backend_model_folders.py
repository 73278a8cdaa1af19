"""A TRL user's own model folder on the mlx and max backends: the folders torch refuses or loads
specially (a peft adapter, custom modelling code, pickled ``.bin`` weights) are one ``error:`` line
naming the field and a fix that works on that backend; no folder's Python runs unasked.

Real mlx-lm / MAX / peft / torch, no hub (the tiny random Llama). The MAX refusals come before
MAX compiles anything (seconds); the one MLX load of a fix is the tiny model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from model_copies import edited_copy, own_model_code_copy, own_tokenizer_code_copy
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, SamplingParams

BACKENDS = ("mlx", "max")


def _engine(backend: str, path: Path | str, **kwargs) -> Engine:
    status = get_registry().status(backend)
    if not status.available:
        pytest.skip(f"backend {backend!r} not usable here: {status.reason}")
    role = "train" if backend == "mlx" else "generate"
    return Engine(get_registry(), backend, EngineConfig(model=str(path), role=role, threads=1, **kwargs))


def _refusal(backend: str, path: Path, **kwargs) -> tuple[str, str]:
    """(field, text) of the one-line ConfigError the engine raises for ``path``."""
    with pytest.raises(ConfigError) as err:
        _engine(backend, path, **kwargs)
    text = str(err.value)
    assert "\n" not in text, text
    return err.value.field, text


@pytest.fixture(scope="module")
def adapter_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """peft's own adapter folder of the tiny model (``adapter_config.json``, no ``config.json``)."""
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = peft.get_peft_model(base, peft.LoraConfig(r=2, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                      task_type="CAUSAL_LM"))
    folder = tmp_path_factory.mktemp("adapters") / "my-adapter"
    model.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_peft_adapter_folder_names_its_base_and_merging_not_a_missing_config(backend, adapter_dir,
                                                                               tiny_model_dir):
    """It read as "has no config.json" (max: "convert the GGUF to an HF folder first"). Now the
    adapter refusal torch gives, with the fix this backend can take: merge, or torch's option."""
    field, text = _refusal(backend, adapter_dir)
    assert field == "model.path"
    assert "peft adapter folder" in text and repr(tiny_model_dir) in text
    assert "merge_and_unload" in text and f"the {backend} backend reads no peft adapter" in text
    assert "rank = 2, alpha = 8" in text and "GGUF" not in text and "has no config.json" not in text


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("trusted", [False, True])
def test_a_folder_of_custom_modelling_code_points_at_torch_with_trust_remote_code(backend, trusted,
                                                                                  tiny_model_dir, tmp_path):
    """auto_map's own code builds a model type neither mlx-lm nor MAX implements: only torch with
    model.trust_remote_code loads it. mlx said "Model type ... not supported", max "generate with
    the torch or mlx backend" (mlx cannot either), neither naming the files or the option."""
    marker = tmp_path / "code-ran"
    folder = own_model_code_copy(tiny_model_dir, tmp_path / "custom", marker)
    field, text = _refusal(backend, folder, trust_remote_code=trusted)
    assert field in ("model.path", "model")
    assert "configuration_custom.py, modeling_custom.py" in text and "auto_map" in text
    assert 'use backend "torch" and set model.trust_remote_code = true' in text
    assert "or mlx backend" not in text
    assert not marker.exists()


def _bin_folder(tiny_model_dir: str, folder: Path, extra: dict | None = None) -> Path:
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    shutil.copytree(tiny_model_dir, folder)
    tensors = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    torch.save({**tensors, **(extra or {})}, folder / "pytorch_model.bin")
    return folder


class _RunsCode:
    """A pickled object that runs code when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_pickled_bin_weights_alone_are_refused_naming_torch_and_a_safetensors_copy(backend, tiny_model_dir,
                                                                                   tmp_path):
    """torch loads a ``pytorch_model.bin``-only folder; mlx-lm ended in a plugin crash ("hook load:
    raised FileNotFoundError: No safetensors found"), MAX in "compatible weights cannot be found
    for 'float32'" with no fix. Now one line naming the file, backend torch and a safetensors copy;
    a .bin holding code is never unpickled."""
    marker = tmp_path / "code-ran"
    for name, extra in (("bin-only", None), ("pickled", {"payload": _RunsCode(marker)})):
        folder = _bin_folder(tiny_model_dir, tmp_path / name, extra)
        field, text = _refusal(backend, folder)
        assert field == "model.path"
        assert "pytorch_model.bin" in text and f"the {backend} backend reads *.safetensors" in text
        assert 'use backend "torch"' in text and "save_pretrained(OUT)" in text
    assert not marker.exists()


def test_the_safetensors_copy_the_bin_refusal_names_loads_on_mlx(tiny_model_dir, tmp_path):
    """The fix as worded: from_pretrained(DIR).save_pretrained(OUT), model.path = OUT."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = _bin_folder(tiny_model_dir, tmp_path / "bin-only")
    out = tmp_path / "out"
    AutoModelForCausalLM.from_pretrained(folder).save_pretrained(out)
    AutoTokenizer.from_pretrained(folder).save_pretrained(out)
    engine = _engine("mlx", out)
    assert engine.generate(["Hello"], SamplingParams(max_new_tokens=2, seed=0))[0].completion_ids.size == 2


def test_mlx_lm_model_file_is_run_only_with_model_trust_remote_code(tiny_model_dir, tmp_path):
    """config.json's ``model_file`` is mlx-lm's own custom-module key (it imports the file). Its
    refusal asked to "Pass trust_remote_code=True" under the fix "use backend torch" (which ignores
    the key). Now one line on ``model.trust_remote_code``, the file unrun; with the option set,
    mlx-lm builds the model from it."""
    marker = tmp_path / "code-ran"
    folder = edited_copy(tiny_model_dir, tmp_path / "model-file", {"model_file": "arch.py"})
    (folder / "arch.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                    "from mlx_lm.models.llama import Model, ModelArgs  # noqa: F401\n")
    field, text = _refusal("mlx", folder)
    assert field == "model.trust_remote_code"
    assert "'arch.py'" in text and "model.trust_remote_code = true" in text and "torch" not in text
    assert not marker.exists()

    engine = _engine("mlx", folder, trust_remote_code=True)
    assert marker.exists()
    assert engine.generate(["Hello"], SamplingParams(max_new_tokens=2, seed=0))[0].completion_ids.size == 2


def test_polyrl_convert_to_mlx_refuses_the_same_folders_on_src(adapter_dir, tiny_model_dir, tmp_path):
    """``polyrl convert SRC OUT --to mlx`` reads folders as the engine does: the adapter, the .bin-only
    folder and a ``model_file`` one are one error on ``src`` (the .bin was a FileNotFoundError)."""
    pytest.importorskip("mlx_lm")
    from polyrl_mlx.convert import convert

    marker = tmp_path / "code-ran"
    model_file = edited_copy(tiny_model_dir, tmp_path / "model-file", {"model_file": "arch.py"})
    (model_file / "arch.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    cases = {adapter_dir: "peft adapter folder", _bin_folder(tiny_model_dir, tmp_path / "bin"): "pytorch_model.bin",
             model_file: "polyrl convert does not run"}
    for source, words in cases.items():
        with pytest.raises(ConfigError) as err:
            convert(str(source), str(tmp_path / f"out-{source.name}"), "mlx")
        assert err.value.field == "src" and words in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()
    assert json.loads((model_file / "config.json").read_text())["model_file"] == "arch.py"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tokenizer_of_its_own_code_runs_only_with_model_trust_remote_code(backend, tiny_model_dir, tmp_path,
                                                                            monkeypatch):
    """mlx-lm loaded the tokenizer with no trust_remote_code, so transformers asked on the terminal
    "Do you wish to run the custom code? [y/N]": a "y" (given here) ran the folder's code with
    model.trust_remote_code false, and a set option was ignored. MAX's refusal was a plugin crash
    quoting transformers' plea. Now one line on model.trust_remote_code, nothing asked or run."""
    marker = tmp_path / "code-ran"
    folder = own_tokenizer_code_copy(tiny_model_dir, tmp_path / "custom-tokenizer", marker)
    monkeypatch.setattr("builtins.input", lambda *_: "y")  # a user answering the prompt
    field, text = _refusal(backend, folder)
    assert field == "model.trust_remote_code"
    assert "tokenization_x.py" in text and "model.trust_remote_code = true" in text and "hf.co" not in text
    assert not marker.exists()


@pytest.fixture()
def own_modules_cache(tmp_path, monkeypatch):
    """transformers copies a trusted folder's code into ``transformers_modules`` under its modules
    cache, puts the cache on sys.path and imports it: this test's own, so no later test finds ours."""
    import sys

    import transformers.dynamic_module_utils as dynamic

    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    monkeypatch.setattr(sys, "path", list(sys.path))  # transformers appends the cache to it
    before = {name for name in sys.modules if name.split(".")[0] == "transformers_modules"}
    for name in before:
        monkeypatch.delitem(sys.modules, name)  # restored afterwards
    yield
    for name in [n for n in sys.modules if n.split(".")[0] == "transformers_modules" and n not in before]:
        del sys.modules[name]


def test_mlx_runs_a_trusted_tokenizers_own_code(tiny_model_dir, tmp_path, own_modules_cache):
    """model.trust_remote_code = true reaches mlx-lm's tokenizer load (it was dropped: a refusal)."""
    marker = tmp_path / "code-ran"
    folder = own_tokenizer_code_copy(tiny_model_dir, tmp_path / "custom-tokenizer", marker)
    engine = _engine("mlx", folder, trust_remote_code=True)
    assert marker.exists() and type(engine.raw.tokenizer).__name__ == "XTok"
    assert engine.generate(["Hello"], SamplingParams(max_new_tokens=2, seed=0))[0].completion_ids.size == 2


def test_max_overrides_may_not_switch_on_a_folders_code_behind_model_trust_remote_code(tiny_model_dir):
    """model.trust_remote_code is the one switch for a folder's own code (polyrl now passes it to
    MAX's AutoModel, which loads the tokenizer again); max_overrides setting it is refused."""
    field, text = _refusal("max", Path(tiny_model_dir), options={"max_overrides": {"trust_remote_code": True}})
    assert field == "backends.options.max_overrides" and "set model.trust_remote_code" in text


def test_an_mlx_lm_adapter_folder_names_mlx_lm_fuse_and_the_fused_folder_loads(tiny_model_dir, tmp_path):
    """An adapter ``mlx_lm.lora`` wrote (its adapter_config.json names the base as ``model``): it read
    as "has no config.json" on mlx, and as a peft adapter (merge_and_unload) on torch. Now both name
    ``mlx_lm.fuse`` with its base, and the fused folder that command writes loads on mlx."""
    import subprocess
    import sys

    pytest.importorskip("mlx_lm")
    from mlx_lm.tuner.utils import linear_to_lora_layers
    from mlx_lm.utils import load, save_config
    from polyrl_mlx._mx import mx  # before mlx.utils: OpenBLAS first (polyrl_mlx.blas)

    from mlx.utils import tree_flatten

    model, _ = load(tiny_model_dir)
    model.freeze()
    lora = {"rank": 2, "dropout": 0.0, "scale": 4.0}
    linear_to_lora_layers(model, 2, lora)
    adapter = tmp_path / "mlx-adapter"
    adapter.mkdir()
    mx.save_safetensors(str(adapter / "adapters.safetensors"),
                        dict(tree_flatten(model.trainable_parameters())))
    save_config({"model": tiny_model_dir, "fine_tune_type": "lora", "num_layers": 2, "lora_parameters": lora},
                adapter / "adapter_config.json")

    for backend in ("mlx", "torch"):
        field, text = _refusal(backend, adapter)
        assert field == "model.path" and "mlx-lm adapter folder" in text and repr(tiny_model_dir) in text
        assert f"python -m mlx_lm.fuse --model {tiny_model_dir} --adapter-path {adapter}" in text
        assert "merge_and_unload" not in text

    out = tmp_path / "fused"
    subprocess.run([sys.executable, "-m", "mlx_lm.fuse", "--model", tiny_model_dir, "--adapter-path", str(adapter),
                    "--save-path", str(out)], check=True, capture_output=True)
    engine = _engine("mlx", out)
    assert engine.generate(["Hello"], SamplingParams(max_new_tokens=2, seed=0))[0].completion_ids.size == 2

