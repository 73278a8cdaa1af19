"""The ``max`` backend on a tiny local Llama: exact rollouts, scoring, weight reload, hybrid run.

MAX compiles one graph per (model shapes, max_length, dtype): minutes on 2 cores the first time,
seconds from the compile cache after. Every engine here uses the same tiny model and the default
``max_length``, so a session compiles once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.testing.conformance import GenerationConformance
from polyrl.types import EngineConfig, OptimizerConfig, SamplingParams, TokenPrompt, TokenSequence

from digits_run import digits_config

CHATS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "Count to five."}],
]


def _usable(name: str) -> None:
    status = get_registry().status(name)
    if not status.available:
        pytest.skip(f"backend {name!r} not usable here: {status.reason}")


def make_engine(model_dir: str, backend: str = "max", role: str = "generate", **options) -> Engine:
    _usable(backend)
    return Engine(get_registry(), backend, EngineConfig(model=model_dir, role=role, threads=1,
                                                        options=options))


@pytest.fixture(scope="module")
def gen(tiny_model_dir) -> Engine:
    return make_engine(tiny_model_dir)


@pytest.fixture(scope="module")
def ref(tiny_model_dir) -> Engine:
    return make_engine(tiny_model_dir, backend="torch", role="train")


def test_registered_with_honest_capabilities():
    reg = get_registry()
    status = reg.status("max")
    assert status.distribution == "polyrl-max"
    caps = reg.spec("max").capabilities
    assert caps.generate and caps.logprobs and caps.weight_import
    assert not caps.train_step and not caps.lora


@pytest.mark.slow
def test_child_pythons_still_start_in_this_environment(gen):
    """MAX's Mojo runtime setenv()s PYTHONEXECUTABLE/PYTHONPATH; after an engine loads, a child
    ``sys.executable`` must still be this virtualenv's Python with its packages."""
    import subprocess
    import sys

    code = "import sys, polyrl_max; print(sys.prefix)"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == sys.prefix


def test_greedy_tokens_and_logprobs_equal_torch(gen, ref):
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    mine, theirs = gen.generate(CHATS, greedy), ref.generate(CHATS, greedy)
    for a, b in zip(mine, theirs):
        assert a.completion_ids.tolist() == b.completion_ids.tolist()
        assert a.prompt_ids.tolist() == b.prompt_ids.tolist()
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
        assert a.finish_reason == b.finish_reason


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_are_the_samplers_distribution(gen, ref, temperature):
    """Log-probs of sampled tokens equal torch's teacher-forced scores at the same temperature,
    and MAX's own scoring agrees too."""
    out = gen.generate(CHATS, SamplingParams(max_new_tokens=10, n=3, seed=5, temperature=temperature))
    assert [c.prompt_index for c in out] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    seqs = [TokenSequence.of(c) for c in out]
    for c, lp_torch, lp_max in zip(out, ref.logprobs(seqs, temperature), gen.logprobs(seqs, temperature)):
        assert len(c.logprobs) == len(c.completion_ids) >= 1
        np.testing.assert_allclose(c.logprobs, lp_torch, atol=1e-4)
        np.testing.assert_allclose(lp_max, lp_torch, atol=1e-4)


def test_seeds_repeat_differ_and_do_not_depend_on_batch_mates(gen):
    sampling = SamplingParams(max_new_tokens=10, n=4, seed=11)
    first, again = gen.generate(CHATS, sampling), gen.generate(CHATS, sampling)
    assert [c.completion_ids.tolist() for c in first] == [c.completion_ids.tolist() for c in again]
    other = gen.generate(CHATS, SamplingParams(max_new_tokens=10, n=4, seed=12))
    assert [c.completion_ids.tolist() for c in first] != [c.completion_ids.tolist() for c in other]
    assert len({tuple(c.completion_ids.tolist()) for c in first[:4]}) > 1  # a group is diverse
    alone = gen.generate(CHATS[:1], sampling)  # row i of prompt 0 has the same seed either way
    assert [c.completion_ids.tolist() for c in alone] == [c.completion_ids.tolist() for c in first[:4]]


def test_top_k_one_is_greedy_and_limits_are_honoured(gen):
    greedy = gen.generate(CHATS, SamplingParams(max_new_tokens=8, temperature=0.0))
    top1 = gen.generate(CHATS, SamplingParams(max_new_tokens=8, temperature=1.3, top_k=1, seed=3))
    assert [c.completion_ids.tolist() for c in greedy] == [c.completion_ids.tolist() for c in top1]
    short = gen.generate(CHATS, SamplingParams(max_new_tokens=3, temperature=1.0, seed=4))
    for c in short:
        assert len(c.completion_ids) <= 3
        assert c.finish_reason == ("stop" if c.completion_ids[-1] in gen.raw.eos_ids else "length")


def test_stop_string_ends_the_completion(gen):
    base = gen.generate(CHATS[:1], SamplingParams(max_new_tokens=16, temperature=0.0))[0]
    text = base.text.strip()
    if len(text) < 4:
        pytest.skip("the tiny model's greedy completion is too short to pick a stop string from")
    stop = text[2:4]
    cut = gen.generate(CHATS[:1], SamplingParams(max_new_tokens=16, temperature=0.0, stop=(stop,)))[0]
    assert cut.finish_reason == "stop" and stop in cut.text
    assert len(cut.completion_ids) < len(base.completion_ids)
    assert cut.completion_ids.tolist() == base.completion_ids[: len(cut.completion_ids)].tolist()


def test_weight_reload_changes_outputs_without_recompiling(gen, ref, tiny_model_dir):
    """torch trains a step, MAX takes its weights: both then compute the same thing."""
    from polyrl.algorithms.objective import Objective
    from polyrl.types import TrainBatch

    trainer = make_engine(tiny_model_dir, backend="torch", role="train")
    seqs = [TokenSequence.of(c) for c in gen.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=1))]
    before = gen.logprobs(seqs, 1.0)
    for _ in range(3):
        trainer.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective())
    # a big step so greedy outputs move too
    weights = {k: v * np.float32(1.5) if "mlp" in k else v for k, v in trainer.export_weights().items()}
    trainer.import_weights(weights)
    gen.import_weights(weights)
    assert gen.raw.last_sync_ms is not None and gen.raw.last_sync_ms < 5000
    after = gen.logprobs(seqs, 1.0)
    assert max(float(np.abs(a - b).max()) for a, b in zip(before, after)) > 1e-3
    for a, b in zip(after, trainer.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    greedy = SamplingParams(max_new_tokens=10, temperature=0.0)
    assert ([c.completion_ids.tolist() for c in gen.generate(CHATS, greedy)]
            == [c.completion_ids.tolist() for c in trainer.generate(CHATS, greedy)])
    # restore the module engine for the tests that follow
    gen.import_weights(ref.export_weights())


def test_partial_or_misshapen_weights_are_refused_before_anything_changes(gen, ref):
    weights = ref.export_weights()
    missing = dict(weights)
    missing.pop(next(k for k in weights if k.endswith("q_proj.weight")))
    with pytest.raises(ConfigError, match="lack"):
        gen.import_weights(missing)
    bad = dict(weights)
    name = next(k for k in weights if k.endswith("up_proj.weight"))
    bad[name] = bad[name][:-1]
    with pytest.raises(ConfigError, match="shape"):
        gen.import_weights(bad)


def test_bad_config_names_the_field(tiny_model_dir, tmp_path):
    _usable("max")
    reg = get_registry()
    with pytest.raises(ConfigError, match="bfloat16") as err:
        Engine(reg, "max", EngineConfig(model=tiny_model_dir, role="generate", dtype="bfloat16"))
    assert err.value.field == "dtype"
    with pytest.raises(ConfigError) as err:
        Engine(reg, "max", EngineConfig(model=str(tmp_path / "nope"), role="generate"))
    assert err.value.field == "model"
    with pytest.raises(ConfigError) as err:
        Engine(reg, "max", EngineConfig(model=tiny_model_dir, role="generate", device="gpu"))
    assert err.value.field == "device"


def test_bfloat16_compute_is_maxs_bfloat16_encoding_on_a_gpu_and_refused_by_name_on_the_cpu(tiny_model_dir):
    """``polyrl bench --compute-dtype bfloat16`` (the GPU suite's max section) and ``model.compute_dtype``
    reach MAX as ``EngineConfig.compute_dtype`` beside ``dtype`` float32: on a GPU that is MAX's bfloat16
    encoding over the float32 weights (MAX casts them at load), never a silent float32 run; on the CPU,
    where MAX has no bfloat16, one error naming compute_dtype before anything compiles."""
    from polyrl_max.engine import resolve_encoding

    _usable("max")
    assert "bfloat16" in get_registry().spec("max").capabilities.compute_dtypes
    assert resolve_encoding("float32", "gpu", {}, None, compute_dtype="bfloat16") == "bfloat16"
    assert resolve_encoding("float32", "gpu", {}, None) == "float32"  # dtype alone: what it says
    assert resolve_encoding("bfloat16", "gpu", {}, None, compute_dtype="bfloat16") == "bfloat16"
    with pytest.raises(ConfigError, match="both choose MAX's encoding") as err:
        resolve_encoding("float32", "gpu", {"quantization_encoding": "float32"}, None, compute_dtype="bfloat16")
    assert err.value.field == "compute_dtype"
    with pytest.raises(ConfigError, match="bfloat16 on a GPU only") as err:
        Engine(get_registry(), "max", EngineConfig(model=tiny_model_dir, role="generate", device="cpu",
                                                   compute_dtype="bfloat16"))
    assert err.value.field == "compute_dtype"


@pytest.mark.parametrize("bad", [0, -3, 2.5, "8", True, None])
def test_a_bad_max_batch_size_names_the_toml_key_before_anything_loads(tiny_model_dir, bad):
    """Named as the user writes it ([backends] options = {max_batch_size = ...}), like the torch and
    remote backends' options; 2.5 and "8" were read as 2 and 8 (or raised a bare ValueError)."""
    from polyrl_max.engine import DEFAULT_MAX_BATCH_SIZE, max_batch_size

    assert max_batch_size({}) == DEFAULT_MAX_BATCH_SIZE and max_batch_size({"max_batch_size": 1}) == 1
    with pytest.raises(ConfigError) as err:
        max_batch_size({"max_batch_size": bad})
    assert err.value.field == "backends.options.max_batch_size" and "integer >= 1" in str(err.value)
    assert err.value.fix
    _usable("max")
    with pytest.raises(ConfigError) as err:  # the engine checks it first: no compile, no model load
        make_engine(tiny_model_dir, max_batch_size=bad)
    assert err.value.field == "backends.options.max_batch_size"


@pytest.mark.parametrize(("key", "bad", "says"), [
    ("cache_dir", 5, "non-empty string"),
    ("cache_dir", "", "non-empty string"),  # was the working directory: MAX's cache landed in cwd
    ("max_model_path", 5, "non-empty string"),
    ("max_model_path", "", "non-empty string"),  # was silently the model itself
    ("quantization_encoding", True, "non-empty string"),  # was the encoding "True"
    ("max_overrides", "enable_prefix_caching", "table"),
    ("max_overrides", ["devices"], "table"),
    ("max_overrides", 3, "table"),
    ("max_overrides", {"devices": "gpu"}, "may not set 'devices'"),  # replaced the checked device
    ("max_overrides", {"max_length": 4096}, "may not set 'max_length'"),
])
def test_bad_max_options_name_the_toml_key_before_anything_loads(tiny_model_dir, tmp_path, monkeypatch,
                                                                  key, bad, says):
    """Read raw, these died with a bare TypeError/ValueError, or were silently misread; each is now
    one ConfigError naming ``backends.options.<key>``, raised before MAX is imported or compiles."""
    monkeypatch.chdir(tmp_path)
    _usable("max")
    with pytest.raises(ConfigError, match=says) as err:
        make_engine(tiny_model_dir, **{key: bad})
    assert err.value.field == f"backends.options.{key}" and err.value.fix
    assert not list(tmp_path.iterdir())  # no compile cache written into the working directory


def _model_of_type(folder, model_type: str, hf_class: str) -> str:
    import json

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": [hf_class]}))
    return str(folder)


def test_the_cpu_refusal_gives_the_architectures_own_reason(tmp_path):
    """Qwen3 declares float32 but MAX's layers need an accelerator; the error blamed bfloat16."""
    from pathlib import Path

    from polyrl_max.architectures import check_architecture

    model = _model_of_type(tmp_path / "qwen3", "qwen3", "Qwen3ForCausalLM")
    with pytest.raises(ConfigError, match="Allreduce") as err:
        check_architecture(Path(model), "float32", "cpu")
    assert "bfloat16" not in str(err.value) and err.value.field == "device"
    model = _model_of_type(tmp_path / "mistral", "mistral", "MistralForCausalLM")
    with pytest.raises(ConfigError, match="bfloat16 only"):
        check_architecture(Path(model), "bfloat16", "cpu")


def test_a_model_max_cannot_generate_is_refused_before_the_trainer_loads(tmp_path, monkeypatch):
    """generate = "max" with a model MAX does not run (here: no such architecture, or Qwen3 on an
    explicit CPU, which MAX declares GPU-only): one ConfigError before *any* engine loads; the torch
    trainer used to load the model first and MAX refused only afterwards."""
    import polyrl.engines as engines
    from polyrl.config import RunConfig

    _usable("max")
    _usable("torch")

    def no_load(*args, **kwargs):
        raise AssertionError("an engine was loaded before the generate model was checked")

    monkeypatch.setattr(engines, "Engine", no_load)
    cases = [(_model_of_type(tmp_path / "mamba", "mamba", "MambaForCausalLM"), "auto", "model.path", "'mamba'"),
             (_model_of_type(tmp_path / "qwen3", "qwen3", "Qwen3ForCausalLM"), "cpu", "model.device", "Allreduce")]
    for model, device, field, says in cases:
        config = RunConfig.from_dict({
            "model": {"path": model, "device": device},
            "backends": {"train": "torch", "generate": "max"},
            "data": {"task": "arithmetic"},
            "rewards": [{"name": "numeric_match"}],
            "train": {"output_dir": str(tmp_path / "run")},
        })
        with pytest.raises(ConfigError, match=says) as err:
            engines.load_engines(config, get_registry())
        assert err.value.field == field and "'max'" in str(err.value) and err.value.fix
    registry = get_registry()  # a GPU, or "auto" (MAX may find one): the engine decides when it loads
    registry.check_architecture("max", cases[1][0], "generate", device="gpu")
    registry.check_architecture("max", cases[1][0], "generate", device="auto")


def test_train_on_max_names_backends_train_not_the_models_architecture(tiny_model_dir):
    """MAX never trains; the refusal said "cannot train architecture 'llama'" on model.path."""
    with pytest.raises(ConfigError, match="does not train") as err:
        get_registry().check_architecture("max", tiny_model_dir, "train")
    assert err.value.field == "backends.train" and "torch" in err.value.fix


def test_an_explicit_quantization_encoding_is_named_by_its_own_errors(tiny_model_dir):
    """An encoding the user set as an option was blamed on ``dtype`` (with "set dtype" as the fix)."""
    from pathlib import Path

    from polyrl_max.architectures import check_architecture
    from polyrl_max.engine import resolve_encoding

    option = "backends.options.quantization_encoding"
    with pytest.raises(ConfigError, match="bfloat16") as err:
        resolve_encoding("float32", "cpu", {"quantization_encoding": "bfloat16"}, gguf=None)
    assert err.value.field == option and "quantization_encoding" in err.value.fix
    with pytest.raises(ConfigError, match="float64") as err:
        check_architecture(Path(tiny_model_dir), "float64", "cpu", encoding_field=option)
    assert err.value.field == option and "quantization_encoding" in err.value.fix
    with pytest.raises(ConfigError) as err:  # dtype's own errors still name dtype
        resolve_encoding("bfloat16", "cpu", {}, gguf=None)
    assert err.value.field == "dtype"


def test_a_bad_max_model_path_names_the_toml_key(tiny_model_dir, tmp_path):
    from polyrl_max.engine import model_location

    with pytest.raises(ConfigError, match="does not exist") as err:
        model_location(tiny_model_dir, {"max_model_path": str(tmp_path / "missing.gguf")})
    assert err.value.field == "backends.options.max_model_path" and err.value.fix
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ConfigError, match="not a .gguf file") as err:
        model_location(tiny_model_dir, {"max_model_path": str(tmp_path / "weights.bin")})
    assert err.value.field == "backends.options.max_model_path"
    (tmp_path / "folder").mkdir()
    with pytest.raises(ConfigError, match="no config.json") as err:
        model_location(tiny_model_dir, {"max_model_path": str(tmp_path / "folder")})
    assert err.value.field == "backends.options.max_model_path"
    with pytest.raises(ConfigError, match="no config.json") as err:  # the model itself: its own field
        model_location(str(tmp_path / "folder"), {})
    assert err.value.field == "model"


def test_a_sequence_past_max_length_names_model_max_length_when_scoring():
    from types import SimpleNamespace

    from polyrl_max.scoring import logprobs

    engine = SimpleNamespace(max_length=4)  # the check runs before the engine is used
    with pytest.raises(ConfigError, match="more than max_length=4") as err:
        logprobs(engine, [TokenSequence([1, 2, 3], [4, 5])], 1.0, reference=False)
    assert err.value.field == "model.max_length" and "raise model.max_length" in err.value.fix


def test_prompt_longer_than_max_length_is_a_config_error(gen):
    with pytest.raises(ConfigError) as err:
        gen.generate(["word " * 2000], SamplingParams(max_new_tokens=4))
    assert err.value.field == "model.max_length"  # the config key a user sets, as on torch and MLX


TOOLS_TEMPLATE = (  # the tiny model's ChatML with a system line listing the tools, as real templates do
    "{% if tools %}{{ '<|im_start|>system\\nTools: ' }}{% for t in tools %}{{ t['function']['name'] + ' ' }}"
    "{% endfor %}{{ '<|im_end|>\\n' }}{% endif %}"
)


def test_encode_chat_passes_tools_to_the_template(gen):
    tok = gen.raw.tokenizer
    original = tok.chat_template
    tool = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}
    tok.chat_template = TOOLS_TEMPLATE + original
    try:
        with_tools = gen.encode_chat(CHATS[0], [tool], add_generation_prompt=True)
        without = gen.encode_chat(CHATS[0], None, add_generation_prompt=True)
    finally:
        tok.chat_template = original
    assert "Tools: add" in tok.decode(with_tools.tolist(), skip_special_tokens=False)
    assert with_tools[-len(without):].tolist() == without.tolist()
    assert without.tolist() == gen.generate(CHATS[:1], SamplingParams(max_new_tokens=1))[0].prompt_ids.tolist()


@pytest.mark.faults
@pytest.mark.parametrize("bad", [-1, 10 ** 6], ids=["negative", "past-vocab"])
def test_token_ids_outside_the_vocabulary_are_a_config_error(gen, bad):
    with pytest.raises(ConfigError, match="outside this model's vocabulary") as err:
        gen.generate([TokenPrompt([1, 2, bad])], SamplingParams(max_new_tokens=2))
    assert err.value.field == "prompt"


class TestMaxConformance(GenerationConformance):
    backend = "max"
    compare_with = "torch"
    logprob_atol = 1e-4

    @pytest.fixture(scope="class")
    @classmethod
    def model_dir(cls, tiny_model_dir) -> str:
        return tiny_model_dir  # the same model as above: no second compile

    #: The module's engine once ``engine`` has been built (``_engine`` hands it out again).
    shared: ClassVar[Engine | None] = None

    @pytest.fixture(scope="class")
    @classmethod
    def engine(cls, gen) -> Engine:
        """The module's engine: the kit's would be the same one (this model, role generate, one
        thread, max_length 1024) loaded a second time (~7 s from the compile cache); a second load
        from the cache keeps its own test (test_a_second_engine_loads_from_the_compile_cache)."""
        cls.shared = gen
        yield gen
        cls.shared = None

    @classmethod
    def _engine(cls, model_dir: str, role: str = "train", backend: str | None = None,
                optimizer: OptimizerConfig | None = None, max_length: int = 1024) -> Engine:
        """The kit's scratch MAX engine (test_eos_is_part_of_the_completion, test_weights_round_trip_
        across_backends) is the module's one, which differs from a fresh load only in its weights:
        ``_original_weights`` puts back whatever a test imported. MAX ignores role and optimizer."""
        if (backend or cls.backend) == cls.backend and max_length == 1024 and cls.shared is not None:
            return cls.shared
        return super()._engine(model_dir, role=role, backend=backend, optimizer=optimizer, max_length=max_length)

    @pytest.fixture(autouse=True)
    def _original_weights(self, request, tiny_model_dir):
        """The shared engine built before any test that may ask ``_engine`` for it, and after a test
        that imported weights into it, the model's own again (tests run in random order)."""
        if not {"engine", "model_dir"} & set(request.fixturenames):
            yield
            return
        engine = request.getfixturevalue("engine")
        version = engine.raw.weight_version
        yield
        if engine.raw.weight_version != version:
            from safetensors.numpy import load_file

            engine.import_weights(load_file(str(Path(tiny_model_dir) / "model.safetensors")))


def test_a_second_engine_loads_from_the_compile_cache(gen, tiny_model_dir):
    again = make_engine(tiny_model_dir)
    assert again.raw.compiled is False  # no new compiled graph in the cache
    assert again.raw.load_seconds < 120  # minutes when compiling; seconds from the cache


READ_ONLY_LOAD = """
import json, sys
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig

engine = Engine(get_registry(), "max", EngineConfig(model=sys.argv[1], role="generate", threads=1))
print(json.dumps({"compiled": engine.raw.compiled}))
"""


@pytest.mark.slow  # a MAX load in a child process: 30-60 s on 2 cores
def test_a_read_only_polyrl_cache_holding_the_graphs_loads_from_them(gen, tiny_model_dir, tmp_path, monkeypatch):
    """The compile cache ``gen`` used, copied into a POLYRL_CACHE mounted read-only (a shared
    cache, one baked into an image): the engine loads from its graphs (MAX reads a read-only
    cache); the write check refused it before MAX was asked."""
    import shutil

    from test_cache_env import _read_only_run

    from polyrl.cache import default_cache_dir

    cache = tmp_path / "cache"
    shutil.copytree(default_cache_dir() / "max", cache / "max", symlinks=True)
    monkeypatch.setenv("POLYRL_CACHE", str(cache))
    monkeypatch.delenv("MODULAR_CACHE_DIR", raising=False)
    result = _read_only_run(READ_ONLY_LOAD, cache, Path(tiny_model_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {"compiled": False}  # its graphs, no compile
    assert "max_cache_read_only" in result.stderr


@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_hybrid_max_generates_torch_trains_and_the_reward_rises(gen, tiny_model_dir, tmp_path):
    """The policy that generates is the policy being trained: torch's weights go to MAX each step."""
    from polyrl.trainer import Trainer

    _usable("torch")
    config = digits_config(tiny_model_dir, tmp_path, {"name": "grpo"}, train="torch", generate="max")
    trainer = Trainer(config)
    summary = trainer.run(progress=False)
    rewards = [m["reward_mean"] for m in summary["history"]]
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 0.15, rewards
    assert trainer.gen_engine.raw.weight_version >= 30  # synced after every step


@pytest.mark.slow  # a GGUF Llama runs with interleaved RoPE: another MAX graph, minutes to compile
def test_gguf_file_loads_and_takes_hf_weights(gen, ref, tiny_model_dir, tmp_path):
    from gguf_util import bpe_vocab, write_gguf

    # with its vocabulary: the engine checks the tokenizer beside it encodes like the GGUF's own
    gguf_path = write_gguf(tiny_model_dir, tmp_path / "gguf", vocab=bpe_vocab(tiny_model_dir))
    engine = make_engine(tiny_model_dir, max_model_path=str(gguf_path))
    assert engine.raw.gguf_file == gguf_path
    greedy = SamplingParams(max_new_tokens=10, temperature=0.0)
    want = ref.generate(CHATS, greedy)
    got = engine.generate(CHATS, greedy)
    assert [c.completion_ids.tolist() for c in got] == [c.completion_ids.tolist() for c in want]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
    # HF-named weights from torch are permuted for the GGUF engine's interleaved RoPE
    weights = {k: v * np.float32(1.3) if "self_attn" in k else v for k, v in ref.export_weights().items()}
    trainer = make_engine(tiny_model_dir, backend="torch", role="train")
    trainer.import_weights(weights)
    engine.import_weights(weights)
    seqs = [TokenSequence.of(c) for c in got]
    for a, b in zip(engine.logprobs(seqs, 1.0), trainer.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(a, b, atol=1e-4)
