"""``MaxEngine``: a model compiled by Modular MAX, its Hugging Face tokenizer, and the seams the
hooks need (prompt encoding, row contexts, the compiled decoder for weight reloads).

Why ``max.pipelines.AutoModel`` and not a hand-written Graph-API decoder
    * Exactness: AutoModel runs MAX's own Llama-family pipeline (paged KV cache, ragged prefill,
      its fused sampler). Measured on the tiny test model its greedy tokens equal transformers'
      and its log-probs agree to ~1e-6 (see ``tests/test_max_backend.py``); a hand-written decoder
      would have to earn that for every architecture MAX already supports (which ones, with which
      encodings and devices: ``architectures.py``, checked before anything compiles).
    * Control: what the high-level ``generate()`` lacks, its building blocks give.
      ``GenerateIterator.from_contexts`` runs *our* ``TextContext`` rows, one ``execute`` per
      ``step()``, in our thread, with our per-row seed, sampling knobs and **logits processors**.
      A processor sees each row's raw next-token logits before the sampler, so it can record them
      (exact sampler log-probs at any temperature, see ``generation.py``) or overwrite them
      (teacher forcing, see ``scoring.py``); ``remove(row)`` ends a row on a stop string.
    * Weights: the compiled decoder (a ``max.engine.Model``) has ``reload(registry)``, which
      swaps every weight buffer in place without recompiling (see ``weights.py``).
    The cost of the choice: a few private-but-documented attributes (``pipeline._pipeline_model``
    and its ``.model``/``.state_dict``, named by MAX's own ``BatchPipeline`` protocol) are read in
    exactly one place, :meth:`MaxEngine.decoder_model`, which fails loudly if MAX moves them.

Compilation
    MAX compiles one graph per (architecture shapes, ``max_length``, dtype, device), which takes
    minutes on a CPU. ``max_batch_size`` does *not* change the graph (measured), ``max_length``
    does, so keep it fixed across runs. Compiled graphs are cached on disk under
    ``$MODULAR_CACHE_DIR``, which this engine points at ``<polyrl cache>/max`` unless the user set
    it (or ``options["cache_dir"]``), so a second run loads in seconds. A background thread logs
    progress while a load is slow, and the ready message says whether the cache was hit.

Options (``EngineConfig.options``)
    ``max_model_path``       what MAX loads, if not ``EngineConfig.model`` (e.g. a ``.gguf`` next
                             to a ``config.json``); the tokenizer always comes from ``model``.
    ``quantization_encoding`` MAX encoding (``float32``, ``bfloat16``, ``q4_k``, ``q4_0``, ``q6_k``);
                             default from ``dtype``. Quantized engines cannot import weights.
    ``max_batch_size``       rows per MAX batch (default 32; larger requests run in chunks).
    ``cache_dir``            compile cache folder (sets ``MODULAR_CACHE_DIR`` before MAX loads).
    ``max_overrides``        dict of extra flat ``PipelineArgs`` fields passed to ``AutoModel``.

``EngineConfig.compute_dtype = "bfloat16"`` (``polyrl bench --compute-dtype bfloat16``) runs MAX's
bfloat16 encoding over the float32 weights (GPU only); ``dtype`` alone stays float32 there.

Not honoured: ``EngineConfig.threads`` (MAX's runtime sizes its own thread pool and AutoModel
exposes no knob), ``lora`` (MAX's in-process API refuses adapters) and ``optimizer`` (no training).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from polyrl.backend_kit.chat import require_chat_template
from polyrl.backend_kit.literal_chat import encode_chat_literal
from polyrl.backend_kit.prompt_batch import encode_prompts
from polyrl.backend_kit.model_folders import adapter_folder_error, pickled_only_error, remote_code_error
from polyrl.backend_kit.tokens import CompletionDecoding, given_a_start, pad_token_id, text_prompt_ids
from polyrl.backend_kit.weight_headers import refuse_config_json_beyond_weights
from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.types import EngineConfig, Prompt, TokenPrompt

from polyrl_max.arrow_first import set_up_arrow_first
from polyrl_max import options as max_options
from polyrl_max.architectures import check_architecture
from polyrl_max.options import DEFAULT_MAX_BATCH_SIZE, max_batch_size

__all__ = ["DEFAULT_MAX_BATCH_SIZE", "MaxEngine", "max_batch_size"]

log = get_logger("polyrl.max")

#: The MAX release this plugin is written against (pipelines API, GenerateIterator.from_contexts).
MAX_VERSION = "26.7"
#: Seconds between "still compiling" messages while a load is slow.
PROGRESS_EVERY_S = 30.0
#: Row ``i`` of a call samples with ``seed + i * ROW_SEED_STRIDE`` (MAX's own stride: a row's
#: Philox key is its seed plus its token count, so rows never share a key).
ROW_SEED_STRIDE = 1 << 32
_U64 = (1 << 64) - 1
FLOAT_ENCODINGS = {"float32": "float32", "bfloat16": "bfloat16"}


def configure_environment(options: Mapping[str, Any]) -> Path:
    """Telemetry off and the compile cache under polyrl's cache, before ``max`` is imported.

    Returns the compile cache folder in effect. The user's own ``MODULAR_CACHE_DIR`` wins unless
    ``options["cache_dir"]`` names another one.
    """
    os.environ.setdefault("MODULAR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("MAX_SERVE_DISABLE_TELEMETRY", "1")
    wanted: str | Path | None = max_options.cache_dir(options)
    if wanted is None and os.environ.get("MODULAR_CACHE_DIR"):
        return Path(os.environ["MODULAR_CACHE_DIR"])
    if wanted is None:
        wanted = _polyrl_cache_folder()  # a bad POLYRL_CACHE: one error line naming it
    folder = Path(wanted).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    current = os.environ.get("MODULAR_CACHE_DIR")
    if "max._core" in sys.modules and current and Path(current) != folder:
        log.warning("max_cache_dir_ignored", wanted=str(folder), in_use=current,
                    why="MAX was already imported in this process with another cache folder")
        return Path(current)
    os.environ["MODULAR_CACHE_DIR"] = str(folder)
    return folder


def _polyrl_cache_folder() -> Path:
    """``POLYRL_CACHE/max``, checked writable; a read-only one that already holds compiled graphs
    (a shared cache, one baked into an image) is used as it is, with a warning. Why: MAX reads a
    read-only cache (it compiles only what is missing there, without caching it), but the write
    check refused it, as the torch backend no longer refuses a read-only cache holding its models.
    Without compiled graphs the write check's error stands: every load would compile again."""
    from polyrl.cache import CACHE_ENV, cache_subdir, default_cache_dir

    try:
        return cache_subdir("max")
    except ConfigError:
        folder = default_cache_dir() / "max"
        if not folder.is_dir() or _compiled_artifacts(folder) == 0:
            raise
    # MAX's own lines for it ("Warning: cache directory '...' is not writable; compilation caching will be
    # disabled", one per cache folder and compile) come from libmax.so straight to stderr: no logger, no
    # setting turns them off (MAX 26.7), and filtering stderr while MAX loads would hide its real errors too.
    # So this line says they are expected, and nothing else needs doing.
    log.warning("max_cache_read_only", cache=str(folder),
                note="MAX reads the compiled graphs there; a model, max_length or dtype not compiled there yet "
                     "compiles on every load (1-3 min on CPU) and is not cached; the \"cache directory ... is "
                     "not writable\" warnings MAX prints while it loads say the same and need nothing more",
                fix=f"point {CACHE_ENV} at a writable folder to cache new graphs")
    return folder


#: Variables MAX's Mojo runtime ``setenv()``s for its embedded interpreter when ``max.pipelines``
#: loads (measured with 26.7: PYTHONEXECUTABLE=<python on PATH>, PYTHONPATH=":").
_MOJO_SET_VARIABLES = ("PYTHONEXECUTABLE", "PYTHONPATH", "PYTHONHOME")


def restore_child_environment() -> None:
    """Undo MAX's process-level ``setenv`` so child Pythons start in the same environment.

    The Mojo runtime writes these behind ``os.environ``'s back; every later ``subprocess`` (a
    reward sandbox, ``torchrun``, a bench child) would otherwise start the first ``python3`` on
    PATH instead of this virtualenv's. ``os.environ`` still holds the user's values.
    """
    for name in _MOJO_SET_VARIABLES:
        value = os.environ.get(name)
        if value is None:
            os.unsetenv(name)
        else:
            os.putenv(name, value)


def _compiled_artifacts(cache: Path) -> int:
    """How many compiled graphs the cache holds (to tell a cache hit from a compile)."""
    mef = cache / ".max_cache" / "mof" / "mef"
    try:
        return sum(1 for _ in mef.rglob("*") if _.is_file())
    except OSError:
        return 0


def resolve_device(name: str) -> tuple[str, str]:
    """(kind, MAX device spec): ``cpu``/``auto``/``gpu``/``gpu:N`` (``cuda[:N]`` accepted)."""
    text = (name or "cpu").strip().lower()
    if text == "auto":
        from max.driver import accelerator_count

        text = "gpu" if accelerator_count() > 0 else "cpu"
    if text == "cpu":
        return "cpu", "cpu"
    kind, _, index = text.partition(":")
    if kind in ("gpu", "cuda"):
        from max.driver import accelerator_count

        if accelerator_count() == 0:
            raise ConfigError("a GPU was requested but MAX sees no accelerator", field="device",
                              fix="use device='cpu', or run where MAX supports the GPU")
        if index and not index.isdigit():
            raise ConfigError(f"bad device index in {name!r}", field="device", fix="use gpu or gpu:N")
        return "gpu", f"gpu:{index or 0}"
    raise ConfigError(f"unknown device {name!r} for the max backend", field="device",
                      fix="use cpu, gpu, gpu:N or auto")


#: GGUF tensor types -> MAX encodings (what MAX 26.7 runs for Llama-family GGUF files).
GGUF_ENCODINGS = {"F32": "float32", "BF16": "bfloat16", "Q4_0": "q4_0", "Q4_K": "q4_k", "Q6_K": "q6_k"}


def gguf_encoding(path: Path, field: str = "model") -> str:
    """The MAX encoding of a GGUF file, from its matrices' tensor type (MAX guesses from the file
    name only, and wrongly for a name without one). ``field``: the setting that named the file.

    MAX 26.7 runs one encoding per model: a file mixing types (llama.cpp's Q4_K_M: Q4_K with
    Q6_K, Q5_0, Q8_0 matrices) or of a type MAX lacks is refused here, before any compile, with
    the way out: convert it to a float HF folder, which MAX runs as float32.
    """
    import gguf

    reader = gguf.GGUFReader(str(path))
    kinds = sorted({t.tensor_type.name for t in reader.tensors if len(t.shape) == 2})
    if len(kinds) == 1 and kinds[0] in GGUF_ENCODINGS:
        return GGUF_ENCODINGS[kinds[0]]
    what = (f"mixes the quantisation types {', '.join(kinds)}" if len(kinds) > 1
            else f"has matrices of type {kinds[0] if kinds else 'none'}")
    raise ConfigError(
        f"{path.name} {what}; MAX 26.7 runs one of {', '.join(GGUF_ENCODINGS)} per model",
        field=field,
        fix=f"convert it to a float HF folder (`polyrl convert {path} OUT --to hf`, dequantised by "
            "the torch backend) and generate from that folder (float32 on CPU)")


def resolve_encoding(dtype: str, device_kind: str, options: Mapping[str, Any],
                     gguf: Path | None, compute_dtype: str | None = None) -> str | None:
    """The MAX ``quantization_encoding``: float32 on CPU, bfloat16 on GPU for ``dtype='auto'``.

    ``compute_dtype='bfloat16'`` (float32 weights, bfloat16 matmuls, as torch's autocast) is the
    bfloat16 encoding: MAX casts the float32 safetensors to bfloat16 when it loads them, and
    ``import_weights`` casts pushed float32 weights the same way. Why it counts: ``polyrl bench
    --compute-dtype bfloat16`` and ``model.compute_dtype`` reach MAX only this way; ``dtype`` stays
    float32 there (the trainer's masters), which alone would run MAX in float32 on a GPU."""
    explicit = max_options.quantization_encoding(options)
    if compute_dtype is not None and compute_dtype != dtype:
        return _compute_encoding(compute_dtype, device_kind, explicit, gguf)
    if explicit:
        encoding = explicit
    elif gguf is not None:
        return gguf_encoding(gguf, _model_field(options))
    elif dtype == "auto":
        encoding = "bfloat16" if device_kind == "gpu" else "float32"
    elif dtype in FLOAT_ENCODINGS:
        encoding = FLOAT_ENCODINGS[dtype]
    else:
        raise ConfigError(f"dtype {dtype!r} is not supported by the max backend", field="dtype",
                          fix="use float32, bfloat16 (GPU only) or auto")
    if encoding == "bfloat16" and device_kind == "cpu":
        if explicit:
            raise ConfigError("MAX refuses bfloat16 on CPU", field=ENCODING_FIELD,
                              fix='use quantization_encoding = "float32" on CPU (bfloat16 needs a GPU)')
        raise ConfigError("MAX refuses bfloat16 on CPU", field="dtype",
                          fix="use dtype='float32' on CPU (bfloat16 needs a GPU)")
    return encoding


def _compute_encoding(compute_dtype: str, device_kind: str, explicit: str | None, gguf: Path | None) -> str:
    """The encoding of a ``compute_dtype`` differing from ``dtype`` (see ``resolve_encoding``)."""
    if compute_dtype != "bfloat16":
        raise ConfigError(f"compute_dtype {compute_dtype!r} is not offered by the max backend",
                          field="compute_dtype", fix="use compute_dtype='bfloat16' (GPU) or remove it")
    if explicit or gguf is not None:
        chosen = f"backends.options.quantization_encoding ({explicit})" if explicit else f"the GGUF file {gguf}"
        raise ConfigError(f"compute_dtype bfloat16 and {chosen} both choose MAX's encoding",
                          field="compute_dtype", fix="remove compute_dtype, or the other choice")
    if device_kind == "cpu":
        raise ConfigError("MAX computes in bfloat16 on a GPU only, and this engine runs on the CPU",
                          field="compute_dtype",
                          fix="remove compute_dtype on CPU (MAX runs float32 there), or run on a GPU")
    return "bfloat16"


#: The setting an explicit MAX encoding comes from, as the user writes it.
ENCODING_FIELD = "backends.options.quantization_encoding"


def encoding_field(options: Mapping[str, Any]) -> str:
    """The setting that chose the encoding: the option when given, else ``dtype``."""
    return ENCODING_FIELD if max_options.quantization_encoding(options) else "dtype"


def _model_field(options: Mapping[str, Any]) -> str:
    """The setting that names what MAX loads, as the user writes it: the option, else the model."""
    return "backends.options.max_model_path" if max_options.max_model_path(options) else "model"


def _path_field(field: str) -> str:
    """``model.path`` for the model (the key a fix tells the user to point elsewhere), else ``field``."""
    return "model.path" if field == "model" else field


def model_location(model: str, options: Mapping[str, Any]) -> tuple[Path, Path, Path | None]:
    """(tokenizer folder, folder MAX loads, GGUF weight file or None)."""
    path = Path(model).expanduser()
    if not path.exists():
        raise ConfigError(f"model path {model!r} does not exist", field="model",
                          fix="give a local HF model folder (or a .gguf next to its config.json), "
                              "or resolve an alias first (registry.resolve_model('tiny-llama'))")
    tok_dir = path.parent if path.is_file() else path
    target = Path(max_options.max_model_path(options) or path).expanduser()
    field = _model_field(options)
    if not target.exists():
        raise ConfigError(f"max_model_path {str(target)!r} does not exist", field=field,
                          fix="point it at a .gguf file or a model folder MAX loads, or remove it")
    gguf: Path | None = None
    if target.is_file():
        if target.suffix != ".gguf":
            raise ConfigError(f"{str(target)!r} is a file but not a .gguf file", field=field,
                              fix="point at the model folder (with config.json) or a .gguf file")
        gguf, target = target, target.parent
    elif not any(target.glob("*.safetensors")):
        ggufs = sorted(target.glob("*.gguf"))
        if len(ggufs) == 1:
            gguf = ggufs[0]
    if not (target / "config.json").exists():
        adapter = adapter_folder_error(target, _path_field(field), backend="max")
        if adapter is not None:
            raise adapter
        raise ConfigError(
            f"{str(target)!r} has no config.json; MAX reads the architecture from it",
            field=field,
            fix="convert the GGUF to an HF folder first (`polyrl convert MODEL --to hf`), or put "
                "the model's config.json and tokenizer next to the .gguf",
        )
    pickled = pickled_only_error(target, "max", _path_field(field)) if gguf is None else None
    if pickled is not None:  # MAX reads safetensors or GGUF weights only
        raise pickled
    if not any(tok_dir.glob("tokenizer*")):
        tok_dir = target
    return tok_dir, target, gguf


def _config_vocab_size(folder: Path) -> int | None:
    """``vocab_size`` from config.json (MAX may pad the logits row beyond it)."""
    import json

    try:
        data = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = data.get("vocab_size") or (data.get("text_config") or {}).get("vocab_size")
    return int(value) if value else None


class _Progress:
    """Logs a line every ``PROGRESS_EVERY_S`` while MAX compiles (a load can take minutes)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="polyrl-max-progress", daemon=True)
        self.start = time.perf_counter()

    def _run(self) -> None:
        while not self._done.wait(PROGRESS_EVERY_S):
            log.info("max_still_compiling", model=self.what,
                     elapsed_s=round(time.perf_counter() - self.start))

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        self._thread.join(timeout=1)


class MaxEngine(CompletionDecoding):
    """One model loaded by MAX. Generation/scoring/weights live in their own modules."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        options = dict(config.options)
        max_options.check(options)  # every option, before anything loads or compiles
        self.max_batch_size = max_batch_size(options)
        self.cache_dir = configure_environment(options)
        self.device_kind, self.device_spec = resolve_device(config.device)
        tok_dir, self.max_model_dir, self.gguf_file = model_location(config.model, options)
        self.encoding = resolve_encoding(config.dtype, self.device_kind, options, gguf=self.gguf_file,
                                         compute_dtype=config.compute_dtype)
        self.architecture = check_architecture(
            self.max_model_dir, self.encoding, self.device_kind,
            encoding_field="compute_dtype" if config.compute_dtype not in (None, config.dtype)
            else encoding_field(options))
        if self.gguf_file is None:  # config.json's sizes against the safetensors headers, before MAX builds
            refuse_config_json_beyond_weights(self.max_model_dir, field=_model_field(options))
        self.max_length = int(config.max_length)
        if config.lora is not None:
            raise ConfigError("the max backend cannot run LoRA adapters in-process", field="lora",
                              fix="train with LoRA elsewhere and import the merged weights "
                                  "(export_weights merges them), or drop lora for this role")
        if config.threads is not None:
            log.debug("max_threads_not_honoured", threads=config.threads,
                      why="MAX sizes its own thread pool; AutoModel exposes no thread count")

        from transformers import AutoTokenizer

        trusted = bool(config.trust_remote_code)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(tok_dir), trust_remote_code=trusted)
        except ValueError as exc:  # transformers' multi-line plea for trust_remote_code was a plugin crash
            refusal = remote_code_error(tok_dir, trusted, exc)
            if refusal is None:
                raise
            raise refusal from None
        if self.gguf_file is not None:  # MAX runs the GGUF: our ids must be the ids it was made for
            from polyrl.backend_kit.gguf_vocab import check_gguf_tokenizer

            check_gguf_tokenizer(self.tokenizer, self.gguf_file, converted=False)
        self.model, self.load_seconds, self.compiled = self._load(options)
        self.pipeline = self.model.pipeline
        self.eos_ids = self._eos_ids()
        self.pad_id = pad_token_id(self.tokenizer)
        #: Token ids MAX may emit (its tokenizer's count) and the model's logits width.
        self.vocab_size = getattr(self.pipeline.tokenizer, "tokenizer_vocab_size", None)
        self.logits_width = _config_vocab_size(self.max_model_dir)
        #: Seeds for calls that pass none: repeatable per engine seed, different per call.
        self._seeds = np.random.default_rng(config.seed)
        #: Filled by ``weights.import_weights``: the engine's own copies of the weights it runs.
        self.weight_arrays: dict[str, Any] | None = None
        #: Name -> (shape, dtype) of the compiled weights, read once before MAX may release them.
        self.weight_shapes: dict[str, tuple[tuple[int, ...], Any]] | None = None
        self.weight_shapes = {name: (tuple(int(d) for d in data.shape), data.dtype)
                              for name, data in self.initial_weights().items()} or None
        self.last_sync_ms: float | None = None
        self.weight_version = 0
        self.MAX_VERSION = MAX_VERSION

    # --- loading -------------------------------------------------------------------------------

    def _load(self, options: Mapping[str, Any]) -> tuple[Any, float, bool]:
        from max.pipelines import AutoModel

        set_up_arrow_first()  # before MAX runs anything: see arrow_first
        restore_child_environment()
        kwargs: dict[str, Any] = {
            "devices": self.device_spec,
            "max_batch_size": self.max_batch_size,
            "max_length": self.max_length,
        }
        if self.encoding is not None:
            kwargs["quantization_encoding"] = self.encoding
        if self.gguf_file is not None:
            kwargs["weight_path"] = [str(self.gguf_file)]
        if self.config.trust_remote_code:  # MAX loads the tokenizer again: the folder's code it was allowed
            kwargs["trust_remote_code"] = True
        kwargs.update(max_options.max_overrides(options))
        before = _compiled_artifacts(self.cache_dir)
        log.info("max_loading", model=str(self.max_model_dir), device=self.device_spec,
                 encoding=self.encoding or "from gguf", max_length=self.max_length,
                 cache=str(self.cache_dir),
                 note="a new model/max_length/dtype compiles for 1-3 min on CPU; cached after")
        start = time.perf_counter()
        try:
            with _Progress(self.max_model_dir.name):
                model = AutoModel(str(self.max_model_dir), **kwargs)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"MAX could not load {str(self.max_model_dir)!r}: {exc}",
                              field="model") from exc
        finally:
            restore_child_environment()
        seconds = time.perf_counter() - start
        compiled = _compiled_artifacts(self.cache_dir) > before
        log.info("max_ready", model=self.max_model_dir.name, load_s=round(seconds, 1),
                 compile_cache="miss (compiled)" if compiled else "hit")
        return model, seconds, compiled

    def _eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        values: list[Any] = [self.tokenizer.eos_token_id]
        values.append(getattr(self.pipeline.tokenizer, "eos_token_ids", None))
        for value in values:
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (Sequence, set, frozenset)):
                ids.update(int(v) for v in value)
        return frozenset(ids)

    # --- MAX internals, read in one place ------------------------------------------------------

    def decoder_model(self) -> Any:
        """The compiled decoder (``max.engine.Model``) and its weights registry (name -> data)."""
        pipeline_model = getattr(self.pipeline, "_pipeline_model", None)
        model = getattr(pipeline_model, "model", None)
        if model is None or not hasattr(model, "reload"):
            raise RuntimeError(
                "this MAX version no longer exposes pipeline._pipeline_model.model.reload; "
                f"polyrl-max is written against max {MAX_VERSION}.x"
            )
        return model

    def initial_weights(self) -> dict[str, Any]:
        """The registry MAX loaded (MAX names -> ``WeightData``); empty if MAX released it."""
        pipeline_model = getattr(self.pipeline, "_pipeline_model", None)
        return dict(getattr(pipeline_model, "state_dict", None) or {})

    def prefill_token_budget(self) -> int:
        """Prompt tokens one MAX step may prefill (MAX refuses a larger batch rather than chunk)."""
        pipeline_model = getattr(self.pipeline, "_pipeline_model", None)
        processor = getattr(pipeline_model, "batch_processor", None)
        budget = getattr(getattr(processor, "runtime", None), "max_batch_active_tokens", None)
        return int(budget) if budget else self.max_batch_size * self.max_length

    @property
    def quantized(self) -> bool:
        encoding = self.pipeline.pipeline_config.model.quantization_encoding
        return str(encoding) not in FLOAT_ENCODINGS

    # --- rows ----------------------------------------------------------------------------------

    def next_seed(self) -> int:
        return int(self._seeds.integers(0, 2**31 - 1))

    def row_seed(self, base: int, row: int) -> int:
        return (int(base) + row * ROW_SEED_STRIDE) & _U64

    def new_context(self, prompt: Sequence[int], max_new_tokens: int, *, temperature: float,
                    top_k: int, top_p: float, seed: int, processor: Any,
                    stop_on_eos: bool = True) -> Any:
        """A MAX ``TextContext`` for one row: explicit sampling (no generation-config defaults,
        no penalties), our logits processor, and EOS handling as asked."""
        from max.pipelines.context import EOSTracker, SamplingParams, TextContext, TokenBuffer

        params = SamplingParams(
            temperature=float(temperature), top_k=int(top_k) if top_k > 0 else -1,
            top_p=float(top_p), min_p=0.0, frequency_penalty=0.0, presence_penalty=0.0,
            repetition_penalty=1.0, max_new_tokens=int(max_new_tokens), min_new_tokens=0,
            ignore_eos=not stop_on_eos, seed=int(seed), logits_processors=[processor],
            detokenize=False,
        )
        return TextContext(
            max_length=len(prompt) + int(max_new_tokens),
            tokens=TokenBuffer(np.asarray(prompt, dtype=np.int64)),
            eos_tracker=EOSTracker(eos_token_ids=set(self.eos_ids) if stop_on_eos else set()),
            ignore_eos=not stop_on_eos,
            sampling_params=params,
            vocab_size=self.vocab_size,
        )

    # --- prompts -------------------------------------------------------------------------------

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """Token ids as the model sees the prompt (chat template + generation prompt for chats,
        a ``TokenPrompt``'s ids verbatim); the same rules as the torch backend, so both feed a
        model identical ids."""
        tok = self.tokenizer
        if isinstance(prompt, TokenPrompt):
            return self.checked_ids(prompt.ids)
        if isinstance(prompt, str):
            return text_prompt_ids(tok, prompt)
        return given_a_start(self.tokenizer, self.encode_chat(prompt, None, add_generation_prompt=True))

    def encode_prompts(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        """``encode_prompt`` of each, the texts tokenized in one call (``backend_kit.prompt_batch``):
        the startup length check counts every dataset prompt."""
        return encode_prompts(self.tokenizer, prompts, self.encode_prompt, self.config.model,
                              self.config.chat_template_kwargs)

    def encode_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                    add_generation_prompt: bool) -> list[int]:
        """The chat template rendered (``tools`` passed to it) and tokenized with no special tokens
        added beyond what the template writes: what ``generate`` feeds the model for a chat."""
        tok = self.tokenizer
        require_chat_template(tok, self.config.model)
        # a message's text (a tool result, an observation) spelling <|im_end|> stays text
        return encode_chat_literal(tok, messages, tools, add_generation_prompt,
                                   template_kwargs=self.config.chat_template_kwargs)

    def checked_ids(self, ids: Any) -> list[int]:
        """A token prompt's ids, each one a row of the compiled embedding table: MAX does not
        bounds-check its gather, so an id past the table reads other memory instead of failing."""
        values = np.asarray(ids, dtype=np.int64).reshape(-1)
        rows = self.logits_width or self.vocab_size
        bad = values[(values < 0) | (values >= rows)] if rows else values[values < 0]
        if len(bad):
            raise ConfigError(f"token id {int(bad[0])} is outside this model's vocabulary [0, {rows or 'vocab'})",
                              field="prompt", fix="give token ids of this model's tokenizer")
        return values.tolist()

    def close(self) -> None:
        """Release MAX's KV cache and buffers (the engine is unusable afterwards)."""
        self.model.close()

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (f"MaxEngine(model={self.config.model!r}, role={self.config.role!r}, "
                f"device={self.device_spec}, encoding={self.encoding}, max_length={self.max_length})")
