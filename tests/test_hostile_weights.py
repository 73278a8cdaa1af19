"""A model folder is someone else's data, on every path that loads one: a config.json claiming
more than its safetensors hold (layers, MLP or expert sizes, experts) is one error line naming
the key before anything is built, for the torch reward model, MLX and MAX as for the torch
policy (tests/test_hostile_files.py); an MLX LoRA checkpoint whose adapter file lacks or adds
tensors is refused, as on torch, not resumed with fresh or ignored adapters."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hf_families import build_family_model, require_backends
from model_copies import edited_copy

from polyrl.errors import ConfigError, RewardError

pytestmark = pytest.mark.faults


def _edited(src: str | Path, dst: Path, **config) -> Path:
    """A copy of the model folder ``src`` whose config.json says ``config`` on top of its own."""
    return edited_copy(src, dst, config)


def _engine(path: str | Path, backend: str = "torch", role: str = "generate", **extra):
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    return Engine(get_registry(), backend, EngineConfig(model=str(path), role=role, threads=1, **extra))


# --- the sizes a header check reads, in each family's naming --------------------------------------


def _f32(*shape: int) -> tuple[str, tuple[int, ...]]:
    return ("F32", shape)


#: one MoE layer's tensors, 4 experts of width 32 over hidden 64, as each layout names them
MOE_LAYOUTS = {
    "qwen_moe per expert (HF files)": {
        **{f"model.layers.0.mlp.experts.{e}.{p}.weight": _f32(32, 64) for e in range(4) for p in ("gate_proj", "up_proj")},
        **{f"model.layers.0.mlp.experts.{e}.down_proj.weight": _f32(64, 32) for e in range(4)},
        "model.layers.0.mlp.gate.weight": _f32(4, 64)},
    "transformers fused": {"model.layers.0.mlp.experts.gate_up_proj": _f32(4, 64, 64),
                           "model.layers.0.mlp.experts.down_proj": _f32(4, 64, 32),
                           "model.layers.0.mlp.gate.weight": _f32(4, 64)},
    "mixtral per expert": {
        **{f"model.layers.0.block_sparse_moe.experts.{e}.{w}.weight": _f32(*((64, 32) if w == "w2" else (32, 64)))
           for e in range(4) for w in ("w1", "w2", "w3")},
        "model.layers.0.block_sparse_moe.gate.weight": _f32(4, 64)},
    "mlx-lm switch_mlp": {f"model.layers.0.mlp.switch_mlp.{p}.weight": _f32(4, *((64, 32) if p == "down_proj" else (32, 64)))
                          for p in ("gate_proj", "up_proj", "down_proj")},
}
EMBED = {"model.embed_tokens.weight": _f32(256, 64), "model.layers.0.input_layernorm.weight": _f32(64)}


@pytest.mark.parametrize("layout", list(MOE_LAYOUTS))
def test_experts_and_their_width_are_read_from_every_moe_layout(layout):
    from polyrl.backend_kit.weight_headers import held_experts, size_problem

    shapes = {**EMBED, **MOE_LAYOUTS[layout]}
    assert held_experts(shapes) == 4
    key = "num_local_experts" if "mixtral" in layout else "num_experts"
    assert size_problem(shapes, {"experts": (key, 4), "moe_intermediate": ("moe_intermediate_size", 32)}) is None
    assert size_problem(shapes, {"experts": (key, 64)}) == f"{key} is 64, but the weights hold 4 experts per layer"
    assert size_problem(shapes, {"moe_intermediate": ("moe_intermediate_size", 10**7)}) == (
        "moe_intermediate_size is 10000000, larger than any dimension of the layers' tensors (the largest is 64)")


def test_a_qwen_moe_intermediate_size_its_dense_layers_would_use_is_bounded_by_the_weights():
    """Qwen-MoE uses intermediate_size only in dense layers, which a model may not have: a value
    beyond the layers' tensors (but not the embedding's rows) is legitimate there, not in a dense
    model; 10**7 is neither."""
    from polyrl.backend_kit.weight_headers import size_problem

    shapes = {**EMBED, **MOE_LAYOUTS["transformers fused"]}
    moe = {"moe_intermediate": ("moe_intermediate_size", 32)}
    assert size_problem(shapes, {**moe, "intermediate": ("intermediate_size", 128)}) is None
    assert "larger than any dimension of the layers' tensors" in str(
        size_problem(shapes, {"intermediate": ("intermediate_size", 128)}))
    assert size_problem(shapes, {**moe, "intermediate": ("intermediate_size", 10**7)}) == (
        "intermediate_size is 10000000, larger than any dimension of the weights (the largest is 256)")


# --- the torch policy: MLP and expert sizes -------------------------------------------------------


def test_an_intermediate_size_beyond_the_weights_is_refused_before_the_model_is_built(tiny_model_dir, tmp_path):
    """10**7 asked for gigabytes per layer before transformers found the shapes wrong."""
    model = _edited(tiny_model_dir, tmp_path / "m", intermediate_size=10**7)
    with pytest.raises(ConfigError) as err:
        _engine(model)
    assert err.value.field == "model.path" and "config.json" in str(err.value)
    assert "intermediate_size is 10000000, larger than any dimension of the layers' tensors" in str(err.value)


def _mixtral(dst: Path, tokenizer_dir: str) -> str:
    """A tiny random Mixtral (2 layers, 4 experts of width 32) with the tiny Llama's tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    vocab = json.loads((Path(tokenizer_dir) / "config.json").read_text())["vocab_size"]
    config = AutoConfig.for_model("mixtral", vocab_size=vocab, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
                                  num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=256,
                                  bos_token_id=0, eos_token_id=2, pad_token_id=3)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(dst)
    for f in Path(tokenizer_dir).iterdir():
        if f.is_file() and f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, dst / f.name)
    return str(dst)


@pytest.mark.parametrize("family", ["qwen2_moe", "qwen3_moe", "mixtral"])
def test_a_moe_config_claiming_more_experts_or_wider_ones_is_refused(family, tiny_model_dir, tmp_path):
    pytest.importorskip("torch")
    built = (_mixtral(tmp_path / family, tiny_model_dir) if family == "mixtral"
             else build_family_model(family, tmp_path / family))
    _engine(built)  # as saved: loads
    data = json.loads((Path(built) / "config.json").read_text())
    experts = next(k for k in ("num_experts", "num_local_experts") if k in data)
    width = "moe_intermediate_size" if "moe_intermediate_size" in data else "intermediate_size"
    for key, value, words in [(experts, 64, f"{experts} is 64, but the weights hold 4 experts per layer"),
                              (width, 10**6, f"{width} is 1000000, larger than any dimension")]:
        with pytest.raises(ConfigError) as err:
            _engine(_edited(built, tmp_path / f"{family}-{key}", **{key: value}))
        assert err.value.field == "model.path" and words in str(err.value), str(err.value)


# --- the torch reward model -----------------------------------------------------------------------


@pytest.mark.parametrize(("key", "value", "words"), [
    ("num_hidden_layers", 200, "num_hidden_layers is 200, but the weights hold 2 numbered layers"),
    ("intermediate_size", 10**6, "intermediate_size is 1000000, larger than any dimension"),
])
def test_a_reward_models_config_claiming_more_than_its_weights_is_refused(tmp_path, key, value, words):
    """transformers built the 200 layers and filled 198 with random weights, with a warning only:
    the reward scored with a random network."""
    pytest.importorskip("torch")
    from polyrl_torch.reward_model import load_reward_model
    from polyrl_torch.testing.tiny_reward_model import build_tiny_reward_model

    model = _edited(build_tiny_reward_model(tmp_path / "rm"), tmp_path / "downloaded", **{key: value})
    with pytest.raises(RewardError) as err:
        load_reward_model(str(model))
    text = str(err.value)
    assert text.startswith("reward_model: options.path: config.json") and words in text and "\n" not in text, text


# --- MLX: the policy's config.json and a LoRA checkpoint's adapters -------------------------------


@pytest.mark.parametrize(("key", "value", "words"), [
    ("num_hidden_layers", 20000, "num_hidden_layers is 20000, but the weights hold 2 numbered layers"),
    ("intermediate_size", 10**7, "intermediate_size is 10000000, larger than any dimension"),
    ("vocab_size", 10**6, "vocab_size is 1000000, but the embedding in the weights has"),
])
def test_an_mlx_policy_config_claiming_more_than_its_weights_is_refused_from_the_headers(
        tiny_model_dir, tmp_path, key, value, words):
    require_backends("mlx")
    model = _edited(tiny_model_dir, tmp_path / "downloaded", **{key: value})
    with pytest.raises(ConfigError) as err:
        _engine(model, "mlx")
    assert err.value.field == "model.path" and words in str(err.value), str(err.value)


def _mlx_lora_checkpoint(tiny_model_dir: str, tmp_path: Path):
    """(a fresh LoRA engine, its checkpoint folder, the adapter file) after one saved LoRA engine."""
    from polyrl.types import LoraConfig, OptimizerConfig

    extra = dict(lora=LoraConfig(rank=2, alpha=4, target_modules=("q_proj", "v_proj")),
                 optimizer=OptimizerConfig(lr=1e-2))
    _engine(tiny_model_dir, "mlx", "train", **extra).save_checkpoint(str(tmp_path / "ck"))
    return _engine(tiny_model_dir, "mlx", "train", **extra), tmp_path / "ck", tmp_path / "ck" / "adapter" / "adapters.safetensors"


@pytest.mark.parametrize("edit", ["missing", "unexpected", "reshaped"])
def test_an_mlx_lora_checkpoint_with_edited_adapters_is_refused_naming_them(tiny_model_dir, tmp_path, edit):
    """mlx loaded the adapter file with strict=False: missing adapters kept their fresh values
    (B = 0), unknown ones were ignored, and the resume went on as if exact."""
    require_backends("mlx")
    from safetensors.numpy import load_file, save_file

    fresh, checkpoint, adapter_file = _mlx_lora_checkpoint(tiny_model_dir, tmp_path)
    tensors = load_file(str(adapter_file))
    named = sorted(n for n in tensors if "layers.1." in n and n.endswith("lora_b"))
    assert named
    if edit == "missing":
        tensors = {n: t for n, t in tensors.items() if n not in named}
        words = f"lacks {len(named)} of this model's {len(load_file(str(adapter_file)))} LoRA adapter tensors"
    elif edit == "unexpected":
        named = ["model.layers.0.mlp.up_proj.lora_b"]
        tensors[named[0]] = np.zeros((2, 128), np.float32)
        words = f"holds 1 tensor(s) not among this model's {len(tensors) - 1} LoRA adapter tensors"
    else:
        tensors[named[0]] = np.zeros((3, 3), np.float32)
        words = f"of shape [3, 3], but this model's is {list(load_file(str(adapter_file))[named[0]].shape)}"
    save_file(tensors, str(adapter_file))
    before = {k: np.asarray(v) for k, v in fresh.export_weights().items()}
    with pytest.raises(ConfigError) as err:
        fresh.load_checkpoint(str(checkpoint))
    text = str(err.value)
    assert err.value.field == "--resume" and str(adapter_file) in text and named[0] in text, text
    assert words in text and "--resume-weights-only" in text and "\n" not in text, text
    after = fresh.export_weights()
    assert all(np.array_equal(before[k], np.asarray(after[k])) for k in before)  # refused before any change


# --- MAX ----------------------------------------------------------------------------------------------


def test_a_max_models_config_claiming_more_layers_is_refused_before_max_builds_it(tiny_model_dir, tmp_path):
    require_backends("max")
    model = _edited(tiny_model_dir, tmp_path / "downloaded", num_hidden_layers=20000)
    with pytest.raises(ConfigError) as err:
        _engine(model, "max")
    assert err.value.field == "model" and "num_hidden_layers is 20000, but the weights hold 2" in str(err.value)


@pytest.mark.parametrize(("key", "value", "words"), [
    ("dim", 4096, "dim is 4096, a size no tensor in the weights has"),
    ("hidden_dim", 10**7, "hidden_dim is 10000000, larger than any dimension"),
])
def test_a_max_reward_models_config_claiming_more_than_its_weights_is_one_error_line(
        tiny_model_dir, tmp_path, key, value, words):
    """A wider ``dim`` failed MAX's graph build with a many-line diagnostic, and a ``hidden_dim`` of
    10**7 loaded as if config.json were right (the graph takes the weights' shapes)."""
    require_backends("max")
    torch = pytest.importorskip("torch")
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    from polyrl_max.reward_model import load

    torch.manual_seed(0)
    DistilBertForSequenceClassification(DistilBertConfig(
        vocab_size=512, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=128,
        num_labels=1)).save_pretrained(tmp_path / "rm")
    for f in Path(tiny_model_dir).glob("*token*"):
        shutil.copy(f, tmp_path / "rm" / f.name)
    model = _edited(tmp_path / "rm", tmp_path / "downloaded", **{key: value})
    with pytest.raises(RewardError) as err:
        load(str(model))
    text = str(err.value)
    assert text.startswith("max_reward_model: options.path: config.json") and words in text and "\n" not in text, text


# --- the torch reward model: weights that lack, reshape or never had what its config needs ---------


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory) -> str:
    pytest.importorskip("torch")
    from polyrl_torch.testing.tiny_reward_model import build_tiny_reward_model

    return build_tiny_reward_model(tmp_path_factory.mktemp("rm") / "tiny-rm")


def _reweighted(src: str, dst: Path, edit) -> str:
    """A copy of the model folder ``src`` whose model.safetensors holds ``edit(tensors)``."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    save_file(edit(load_file(str(dst / "model.safetensors"))), str(dst / "model.safetensors"), metadata={"format": "pt"})
    return str(dst)


def _refused(path: str) -> str:
    from polyrl_torch.reward_model import load_reward_model

    with pytest.raises(RewardError) as err:
        load_reward_model(path)
    text = str(err.value)
    assert text.startswith("reward_model: options.path: ") and "\n" not in text, text
    return text


@pytest.mark.parametrize("edit", ["q_proj dropped", "layer 1 renumbered 5"])
def test_a_reward_model_whose_weights_lack_tensors_is_refused_naming_them(tiny_rm, tmp_path, edit):
    """transformers filled the missing tensors with random weights and only warned: every reward
    was noise. Layer 1 renumbered 5 still holds 2 numbered layers, as config.json says, so the
    header bound passes it; layer 1 is then missing."""
    if edit == "q_proj dropped":
        folder = _reweighted(tiny_rm, tmp_path / "m", lambda t: {k: v for k, v in t.items()
                                                                 if k != "model.layers.1.self_attn.q_proj.weight"})
        named = "lack 1 tensor(s) config.json's model needs, which transformers would fill with random weights: " \
                "model.layers.1.self_attn.q_proj.weight"
    else:
        folder = _reweighted(tiny_rm, tmp_path / "m", lambda t: {k.replace("layers.1.", "layers.5."): v
                                                                 for k, v in t.items()})
        named = "lack 9 tensor(s) config.json's model needs, which transformers would fill with random weights: " \
                "model.layers.1.input_layernorm.weight, model.layers.1.mlp.down_proj.weight"
    text = _refused(folder)
    assert named in text and "Fix: use the config.json saved with these weights" in text, text


def test_a_reward_models_tensor_of_another_shape_is_one_error_line(tiny_rm, tmp_path):
    """It was a RuntimeError traceback telling to set ignore_mismatched_sizes."""
    import torch

    folder = _reweighted(tiny_rm, tmp_path / "m",
                         lambda t: {**t, "model.layers.0.self_attn.q_proj.weight": torch.zeros(3, 3)})
    text = _refused(folder)
    assert ("does not match its weights: 1 tensor(s) of another shape: model.layers.0.self_attn.q_proj.weight "
            "([3, 3] in the weights, [64, 64] in config.json's model)") in text, text


def test_a_causal_lm_folder_is_refused_as_a_reward_model_and_real_classifiers_still_score(
        tiny_rm, tiny_model_dir, tmp_path):
    """The tiny Llama policy loaded as LlamaForSequenceClassification with a random score head and
    only a warning: rewards were noise. Real classifiers (the tiny reward model, a config naming
    fewer layers than its weights hold, BERT/DistilBERT) load and score as before."""
    import torch
    from transformers import (BertConfig, BertForSequenceClassification, DistilBertConfig,
                              DistilBertForSequenceClassification)

    from polyrl_torch.reward_model import score_texts

    text = _refused(tiny_model_dir)
    assert "is not a sequence-classification reward model (config.json's architectures: LlamaForCausalLM): " \
           "its weights have no classification head (score.weight)" in text, text
    assert "*ForSequenceClassification" in text and 'name = "llm_judge"' in text, text
    torch.manual_seed(0)
    classifiers = {
        "bert": BertForSequenceClassification(BertConfig(
            vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=128, num_labels=1)),
        "distilbert": DistilBertForSequenceClassification(DistilBertConfig(
            vocab_size=512, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=128, num_labels=1))}
    folders = [tiny_rm, str(_edited(tiny_rm, tmp_path / "fewer", num_hidden_layers=1))]
    for name, model in classifiers.items():
        model.save_pretrained(tmp_path / name)
        for f in Path(tiny_model_dir).glob("*token*"):
            shutil.copy(f, tmp_path / name / f.name)
        folders.append(str(tmp_path / name))
    for folder in folders:
        scores = score_texts(["What is 2 + 3?"], ["5"], {"path": folder})
        assert len(scores) == 1 and np.isfinite(scores[0]), folder


# --- polyrl convert (mlx) ------------------------------------------------------------------------------


def test_polyrl_convert_to_mlx_refuses_a_config_beyond_its_weights_from_the_headers(tiny_model_dir, tmp_path):
    """mlx-lm built the 20000 layers (~13 s) before its own refusal; the headers say it at once."""
    require_backends("mlx")
    from polyrl_mlx.convert import convert

    model = _edited(tiny_model_dir, tmp_path / "downloaded", num_hidden_layers=20000)
    with pytest.raises(ConfigError) as err:
        convert(str(model), str(tmp_path / "out"), to="mlx")
    assert err.value.field == "src" and "num_hidden_layers is 20000, but the weights hold 2 numbered layers" in str(
        err.value), str(err.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["DistilBertForMaskedLM", "BertModel"])
def test_max_reward_model_refuses_a_folder_without_a_classification_head(tiny_model_dir, tmp_path, kind):
    """It refused with the bare name of the first tensor it missed (a base BertModel's, saved
    without the ``bert.`` prefix: its embedding), not saying the folder is no reward model."""
    require_backends("max")
    torch = pytest.importorskip("torch")
    import transformers

    from polyrl_max.reward_model import load

    torch.manual_seed(0)
    config = (transformers.DistilBertConfig(vocab_size=512, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                            max_position_embeddings=128) if kind.startswith("Distil") else
              transformers.BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=128, max_position_embeddings=128))
    getattr(transformers, kind)(config).save_pretrained(tmp_path / "m")
    for f in Path(tiny_model_dir).glob("*token*"):
        shutil.copy(f, tmp_path / "m" / f.name)
    with pytest.raises(RewardError) as err:
        load(str(tmp_path / "m"))
    text = str(err.value)
    head = "pre_classifier.weight" if kind.startswith("Distil") else "bert.pooler.dense.weight"
    assert text.startswith("max_reward_model: options.path: ") and "\n" not in text, text
    assert (f"is not a BERT/DistilBERT sequence-classification reward model: its weights have no classification "
            f"head ({head})") in text and 'name = "llm_judge"' in text, text


# --- a refused folder is one error line: transformers' load report is held back -------------------


def _polyrl(*args: str) -> tuple[int, list[str]]:
    """(exit status, the non-empty stderr lines) of a real ``polyrl`` process."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "polyrl.cli", *args], capture_output=True, text=True, timeout=180)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.returncode, [line for line in done.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("edit", ["missing", "reshaped"])
def test_polyrl_generate_on_weights_lacking_or_reshaping_a_tensor_prints_only_the_error_line(
        tiny_model_dir, tmp_path, edit):
    """transformers printed its LOAD REPORT table (and its "Loading weights" bar) above the error;
    a reshaped tensor was then its RuntimeError text naming neither the tensor nor the shapes."""
    import torch

    name = "model.layers.1.self_attn.q_proj.weight"
    if edit == "missing":
        folder = _reweighted(tiny_model_dir, tmp_path / "m", lambda t: {k: v for k, v in t.items() if k != name})
        words = f"1 missing tensor(s), the weights lack them (they would be random): {name}"
    else:
        folder = _reweighted(tiny_model_dir, tmp_path / "m", lambda t: {**t, name: torch.zeros(3, 3)})
        words = f"1 tensor(s) of another shape: {name} ([3, 3] in the weights, [64, 64] in config.json's model)"
    status, lines = _polyrl("generate", "hi", "--backend", "torch", "--model", folder, "--max-new-tokens", "2")
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: --model: config.json in {folder!r} does not match its weights: "), lines
    assert words in lines[0] and "Fix: use the config.json saved with these weights" in lines[0], lines


def test_polyrl_train_with_a_reward_model_lacking_a_tensor_prints_no_load_report(tiny_rm, tiny_model_dir, tmp_path):
    """The run's own log lines, then the one error line: no transformers table between them."""
    import re

    name = "model.layers.1.self_attn.q_proj.weight"
    folder = _reweighted(tiny_rm, tmp_path / "rm", lambda t: {k: v for k, v in t.items() if k != name})
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\npath = "{tiny_model_dir}"\n[data]\ntask = "arithmetic"\n'
                      f'[[rewards]]\nname = "reward_model"\noptions = {{path = "{folder}"}}\n'
                      f'[generation]\nmax_new_tokens = 2\n[train]\nsteps = 1\nprompts_per_step = 2\nthreads = 1\n'
                      f'output_dir = "{tmp_path / "run"}"\n')
    status, lines = _polyrl("train", str(config), "--no-progress")
    # the error line, then where the run goes on from (the state before the failed step is saved)
    errors = [line for line in lines if line.startswith("error:")]
    assert status == 2 and errors == [lines[-2]] and lines[-1].startswith("the run's newest checkpoint is "), lines
    assert f"reward_model: options.path: the weights in {folder!r} lack 1 tensor(s)" in lines[-2], lines
    assert name in lines[-2], lines
    logged = re.compile(r"\d{4}-\d\d-\d\dT\S+ \[(info|warning)\s*\] ")
    assert all(logged.match(line) for line in lines[:-2]), lines


def test_transformers_report_is_shown_for_weights_polyrl_accepts_and_dropped_for_refused_ones(tiny_rm, tmp_path):
    """A config naming fewer layers than the weights hold loads (the extra tensors change no score):
    transformers' UNEXPECTED report of them still reaches its handlers, once the load is accepted."""
    import logging

    from polyrl_torch.reward_model import load_reward_model

    class Seen(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.texts: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.texts.append(record.getMessage())

    seen = Seen()
    logging.getLogger("transformers").addHandler(seen)
    try:
        _refused(_reweighted(tiny_rm, tmp_path / "m", lambda t: {k: v for k, v in t.items()
                                                                 if k != "model.layers.1.self_attn.q_proj.weight"}))
        assert not any("LOAD REPORT" in text for text in seen.texts), seen.texts
        load_reward_model(str(_edited(tiny_rm, tmp_path / "fewer", num_hidden_layers=1)))
        assert any("LOAD REPORT" in text and "UNEXPECTED" in text for text in seen.texts), seen.texts
    finally:
        logging.getLogger("transformers").removeHandler(seen)
