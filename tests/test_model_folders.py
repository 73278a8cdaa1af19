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


def test_a_known_model_type_with_auto_map_loads_without_its_code_and_other_failures_keep_their_cause(
        tiny_model_dir, tmp_path):
    """Folders of a model type transformers implements often keep an old ``auto_map`` (Phi-3's did):
    they load with transformers' own class, the folder's code unrun, as in TRL; a failure of such a
    folder for another reason (a cut tokenizer.json) is not blamed on trust_remote_code."""
    folder = _copy(tiny_model_dir, tmp_path / "llama-with-auto-map")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_old.OldLlama"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_old.py").write_text("raise SystemExit('the folder code ran')\n")
    assert type(_engine(folder).raw.causal_lm).__name__ == "LlamaForCausalLM"
    (folder / "tokenizer.json").write_text("{")
    with pytest.raises(ConfigError) as err:
        _engine(folder)
    assert err.value.field == "model.path" and "trust_remote_code" not in str(err.value)


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


def _sampling_run(model: Path, tmp_path: Path, **generation):
    from polyrl.config import RunConfig

    return RunConfig.from_dict({
        "model": {"path": str(model)}, "data": {"task": "arithmetic", "options": {"count": 8}},
        "rewards": [{"name": "numeric_match"}], "generation": {"group_size": 2, "max_new_tokens": 4, **generation},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})


def test_the_sampling_values_a_models_generation_config_suggests_are_named_when_the_run_samples_otherwise(
        tiny_model_dir, tmp_path):
    """Qwen3-style ``generation_config.json`` (temperature 0.6, top_p 0.95, top_k 20): polyrl samples with
    ``[generation]`` alone, as TRL's GRPOConfig overrides them, and said nothing. Now one warning names the
    file's values the run does not use and the keys that would; none when the run samples with them."""
    from structlog.testing import capture_logs
    from transformers import GenerationConfig

    from polyrl.engines import load_engines

    folder = _copy(tiny_model_dir, tmp_path / "suggests")
    GenerationConfig(do_sample=True, temperature=0.6, top_p=0.95, top_k=20, bos_token_id=0,
                     eos_token_id=[2, 1]).save_pretrained(folder)
    with capture_logs() as logs:
        load_engines(_sampling_run(folder, tmp_path, temperature=0.6), get_registry())
    said = [e for e in logs if "generation_config.json" in e["event"]]
    assert len(said) == 1 and said[0]["log_level"] == "warning"
    assert "top_p=0.95, top_k=20" in said[0]["event"] and "temperature" not in said[0]["event"]
    assert "generation.top_p = 0.95, generation.top_k = 20" in said[0]["fix"]

    with capture_logs() as logs:
        load_engines(_sampling_run(folder, tmp_path, temperature=0.6, top_p=0.95, top_k=20), get_registry())
        # a file's neutral values (temperature 1.0, as the tiny model's) suggest nothing to warn of
        load_engines(_sampling_run(Path(tiny_model_dir), tmp_path, temperature=0.7, top_p=0.9), get_registry())
    assert json.loads((Path(tiny_model_dir) / "generation_config.json").read_text())["temperature"] == 1.0
    assert not [e for e in logs if "generation_config.json" in e["event"]]


def test_a_generation_config_with_nan_or_infinity_loads_and_suggests_only_its_finite_values(tiny_model_dir, tmp_path):
    """Python's json reads ``NaN`` and ``Infinity``: such a value is no sampling suggestion. The
    warning printing ``temperature`` NaN ended the load with "cannot convert float NaN to integer"."""
    from structlog.testing import capture_logs

    from polyrl.engines import load_engines

    folder = _copy(tiny_model_dir, tmp_path / "odd")
    (folder / "generation_config.json").write_text(
        '{"do_sample": true, "temperature": NaN, "top_p": Infinity, "top_k": 20, "eos_token_id": 2}')
    with capture_logs() as logs:
        load_engines(_sampling_run(folder, tmp_path), get_registry())
    said = [e for e in logs if "generation_config.json" in e["event"]]
    assert len(said) == 1 and "top_k=20" in said[0]["event"], said
    assert "temperature" not in said[0]["event"] and "top_p" not in said[0]["event"]


def test_every_stop_id_a_generation_config_lists_ends_a_completion(tiny_model_dir, tmp_path):
    """Llama 3 / Qwen list several ``eos_token_id``s in ``generation_config.json``: each ends a
    completion (TRL's GRPOTrainer joins them with the tokenizer's eos), not the tokenizer's alone."""
    from transformers import GenerationConfig

    greedy = SamplingParams(max_new_tokens=12, temperature=0.0, seed=0)
    free = _engine(tiny_model_dir).generate(["The quick brown fox"], greedy)[0].completion_ids.tolist()
    stop = free[2]
    folder = _copy(tiny_model_dir, tmp_path / "stop-ids")
    GenerationConfig(bos_token_id=0, eos_token_id=[2, stop]).save_pretrained(folder)
    out = _engine(folder).generate(["The quick brown fox"], greedy)[0]
    assert out.completion_ids.tolist() == free[:free.index(stop) + 1] and out.finish_reason == "stop"


@pytest.mark.parametrize("tied", [True, False])
def test_a_trained_checkpoint_of_a_tied_or_untied_model_reloads_to_the_same_logits(tiny_model_dir, tmp_path, tied):
    """After a train step the saved folder holds the head as the config says (one tensor when tied)."""
    import numpy as np
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    from polyrl.algorithms.objective import Objective
    from polyrl.types import OptimizerConfig, TokenSequence, TrainBatch

    folder = tmp_path / f"tied-{tied}"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    config = model.config
    config.tie_word_embeddings = tied
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (Path(tiny_model_dir) / name).exists():
            shutil.copy(Path(tiny_model_dir) / name, folder / name)
    engine = _engine(folder, optimizer=OptimizerConfig(lr=1e-2, max_grad_norm=None))
    seqs = [TokenSequence.of(c) for c in engine.generate(["The quick"], SamplingParams(max_new_tokens=4, n=2, seed=0))]
    engine.train_step(TrainBatch(seqs, np.array([-1.0, 1.0])), Objective())
    engine.save_checkpoint(str(tmp_path / "saved"))
    ids = torch.tensor([[0, 75, 76, 80]])
    with torch.no_grad():
        want = engine.raw.model(ids).logits
        before = AutoModelForCausalLM.from_pretrained(folder)(ids).logits
        got = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")(ids).logits
    assert not torch.allclose(before, want)  # the step changed the model
    assert torch.allclose(got, want, atol=1e-5)


def test_a_tokenizer_without_pad_token_padding_right_and_a_template_writing_bos(tiny_model_dir, tmp_path):
    """TRL users' tokenizers: no pad token, ``padding_side = "right"`` saved; a batch samples what each
    prompt alone samples. A template writing ``{{ bos_token }}`` for a tokenizer that adds BOS itself
    renders one BOS, as transformers' ``apply_chat_template(tokenize=True)`` (TRL's) does."""
    from transformers import AutoTokenizer

    folder = _copy(tiny_model_dir, tmp_path / "trl-tokenizer")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("pad_token", None)
    config["padding_side"] = "right"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config["chat_template"] = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                               "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    bos = {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}
    tokenizer["post_processor"] = {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                                   "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                                            {"Sequence": {"id": "B", "type_id": 1}}],
                                   "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0],
                                                                        "tokens": ["<|endoftext|>"]}}}
    tokenizer["padding"] = None
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    for name in ("config.json", "generation_config.json", "special_tokens_map.json"):
        saved = json.loads((folder / name).read_text())
        saved.pop("pad_token_id", None)
        saved.pop("pad_token", None)
        (folder / name).write_text(json.dumps(saved))
    hf = AutoTokenizer.from_pretrained(folder)
    assert hf.pad_token is None and hf.padding_side == "right" and hf("hi")["input_ids"][0] == hf.bos_token_id

    engine = _engine(folder)
    assert engine.raw.pad_id == hf.eos_token_id  # batches pad with the eos, as TRL sets pad = eos
    chat = [{"role": "user", "content": "hi"}]
    ids = engine.raw.encode_prompt(chat)
    assert ids == hf.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    assert ids.count(hf.bos_token_id) == 1
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0, seed=0)
    prompts = ["The quick brown fox jumps over", "Hi"]
    batch = [c.completion_ids.tolist() for c in engine.generate(prompts, greedy)]
    assert batch == [engine.generate([p], greedy)[0].completion_ids.tolist() for p in prompts]
