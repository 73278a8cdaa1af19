"""Load-time checks of a model type polyrl has not tested on MLX (``"*"`` in ``ARCHITECTURES``).

Why: mlx-lm runs many families, but three of its habits make a model load and then compute
something else than the checkpoint's own (transformers) forward, or make polyrl's sampler and
scorer disagree, with no error:

* ``ModelArgs.from_dict`` keeps only the config keys its dataclass declares, so a quirk mlx-lm's
  module does not implement is dropped (Gemma 2's and Starcoder2's sliding windows, Qwen2-MoE's
  ``norm_topk_prob``);
* ``sanitize`` may drop checkpoint tensors before the strict load (an untied head the module
  ties);
* the sampler runs the model through its KV cache, the scorer through its full forward.

Each is checked cheaply when such a model loads (config keys, tensor sizes in the safetensors
headers, one probe batch through both paths), and a mismatch is a ``ConfigError`` on
``model.path`` naming the fix, not a run that trains on wrong log-probs.

Tested families are not immune to the first habit: mlx-lm runs ``mistral`` with its llama module,
which reads ``sliding_window`` but slides only the layers a ``layer_types`` list names (Mistral
configs have none), and its qwen2, qwen3 and phi3 modules have no window at all, while
transformers applies the config's window. ``check_window_applied`` refuses such a window when a
sequence of ``model.max_length`` tokens could reach past it.
"""

from __future__ import annotations

import dataclasses
import glob
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from polyrl.backend_kit.weight_headers import tensor_shapes
from polyrl.errors import ConfigError

#: Largest |log-prob| gap between the sampler's and the scorer's path the probe accepts: float32
#: kernels differ by ~1e-6; 16-bit weights round every layer's output.
PROBE_TOLERANCE = {"float32": 1e-3}
PROBE_TOLERANCE_16BIT = 5e-2
#: Probe rows: two prompts of different lengths (the sampler pads them), 8 forced tokens each.
PROBE_PROMPTS = (1, 4)
PROBE_COMPLETION = 8
#: Checkpoint tensors a model keeps as buffers, not weights (rotary tables, GPT-2's causal mask).
BUFFER_SUFFIXES = (".rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias")
FIX = ("use a model family listed by `polyrl backends --json` (mlx architectures), or backend "
       "\"torch\", which runs the family's own transformers forward")


def _inert(value: Any) -> bool:
    return value is None or value is False or value == [] or value == {}


def _sliding_window_inert(value: Any, config: Mapping[str, Any], max_length: int) -> bool:
    return _inert(value) or config.get("use_sliding_window") is False or int(value) >= max_length


#: Config keys whose value changes the forward, and when a value changes nothing.
QUIRKS: dict[str, Callable[[Any, Mapping[str, Any], int], bool]] = {
    "sliding_window": _sliding_window_inert,
    "attn_logit_softcapping": lambda v, c, m: _inert(v) or v == 0,
    "final_logit_softcapping": lambda v, c, m: _inert(v) or v == 0,
    "logit_scale": lambda v, c, m: _inert(v) or v == 1,
    "logits_scaling": lambda v, c, m: _inert(v) or v == 1,
    "embedding_multiplier": lambda v, c, m: _inert(v) or v == 1,
    "residual_multiplier": lambda v, c, m: _inert(v) or v == 1,
    "attention_multiplier": lambda v, c, m: _inert(v),
    "partial_rotary_factor": lambda v, c, m: _inert(v) or v == 1,
    "rotary_pct": lambda v, c, m: _inert(v) or v == 1,
    "norm_topk_prob": lambda v, c, m: _inert(v),
    "query_pre_attn_scalar": lambda v, c, m: _inert(v),
    "rope_scaling": lambda v, c, m: _inert(v) or (isinstance(v, dict) and v.get(
        "rope_type", v.get("type", "default")) == "default"),
}


def dropped_quirks(config: Mapping[str, Any], read: set[str], max_length: int) -> list[str]:
    """Keys of ``config`` that change the forward but are not among the keys mlx-lm ``read``."""
    return [key for key, inert in QUIRKS.items()
            if key in config and key not in read and not inert(config[key], config, max_length)]


def _weight_files(model_dir: Path) -> list[Path]:
    """The files mlx-lm loads (``model*.safetensors``)."""
    return [Path(f) for f in sorted(glob.glob(str(model_dir / "model*.safetensors")))]


def checkpoint_sizes(model_dir: Path) -> dict[str, int]:
    """Element count of every tensor in the files mlx-lm loads (``model*.safetensors``)."""
    return {name: math.prod(shape) for name, (_, shape) in tensor_shapes(_weight_files(model_dir)).items()}


def _params(model: Any) -> dict[str, Any]:
    from mlx.utils import tree_flatten

    return dict(tree_flatten(model.parameters()))


def _head_is_tied_copy(engine: Any, params: Mapping[str, Any]) -> bool:
    """True when the checkpoint's ``lm_head.weight`` equals a tensor of the model of its shape
    (the embedding it ties its head to, saved twice): dropping it then loses nothing."""
    from polyrl_mlx._mx import mx

    files = [f for f in _weight_files(engine.model_dir) if "lm_head.weight" in tensor_shapes([f])]
    if not files or "lm_head.weight" in params:
        return False
    head = mx.load(str(files[0]))["lm_head.weight"]
    return any(tuple(v.shape) == tuple(head.shape) and bool(mx.array_equal(v, head.astype(v.dtype)).item())
               for v in params.values())


def check_weights_consumed(engine: Any) -> None:
    """Refuse a float checkpoint mlx-lm loaded with tensors it dropped (sizes, not names: mlx-lm
    renames, fuses and stacks tensors, which keeps their total)."""
    if engine.quantization:
        return  # packed sizes differ from the float ones; a quantized folder was written by mlx-lm
    stored = {k: n for k, n in checkpoint_sizes(engine.model_dir).items() if not k.endswith(BUFFER_SUFFIXES)}
    params = _params(engine.model)
    excess = sum(stored.values()) - sum(int(v.size) for v in params.values())
    if excess <= 0:
        return
    if excess == stored.get("lm_head.weight") and _head_is_tied_copy(engine, params):
        return
    raise ConfigError(
        f"mlx-lm's {engine.model_type!r} module ignores {excess} of the {sum(stored.values())} weights in "
        f"{str(engine.model_dir)!r} (e.g. an untied output head it ties): the model would load silently wrong",
        field="model.path", fix=FIX)


def check_config_read(engine: Any) -> None:
    """Refuse a config whose forward-changing keys mlx-lm's module does not read (it drops them)."""
    args = getattr(engine.model, "args", None)
    if args is None or not dataclasses.is_dataclass(args):
        return
    read = {f.name for f in dataclasses.fields(args)}
    dropped = dropped_quirks(engine.hf_config, read, int(engine.config.max_length))
    if dropped:
        shown = ", ".join(f"{k}={engine.hf_config[k]!r}" for k in dropped)
        raise ConfigError(
            f"mlx-lm's {engine.model_type!r} module does not implement {shown} from the config of "
            f"{str(engine.model_dir)!r}: the model would compute other log-probs than its checkpoint's",
            field="model.path", fix=FIX)


def _probe_rows(vocab: int) -> tuple[list[list[int]], list[list[int]]]:
    prompts, completions = [], []
    for row, length in enumerate(PROBE_PROMPTS):
        ids = ((np.arange(length + PROBE_COMPLETION) + 3 * row) * 7919 + 11) % vocab  # spread out
        prompts.append([int(i) for i in ids[:length]])
        completions.append([int(i) for i in ids[length:]])
    return prompts, completions


def probe_gap(engine: Any) -> float:
    """Largest |log-prob| gap between the sampler's cached path and the scorer's full forward on
    the probe rows (two prompt lengths, each expanded to two samples as GRPO groups are)."""
    from polyrl.types import TokenSequence

    from polyrl_mlx._mx import mx
    from polyrl_mlx.generation import forced_logprobs
    from polyrl_mlx.scoring import flat_logprobs

    prompts, completions = _probe_rows(engine.vocab_size)
    with mx.stream(engine.device):
        sampled = forced_logprobs(engine, prompts, [c for c in completions for _ in range(2)], n=2)[::2]
        flat, _ = flat_logprobs(engine, [TokenSequence(np.asarray(p), np.asarray(c))
                                         for p, c in zip(prompts, completions)], 1.0)
        scored = np.array(flat, dtype=np.float32).reshape(len(prompts), -1)
    return max(float(np.abs(a - b).max()) for a, b in zip(sampled, scored))


def check_sampler_matches_scorer(engine: Any) -> None:
    """Refuse a model whose cached forward (the sampler's) and full forward (the scorer's) give
    other log-probs on the probe rows (GRPO's ratio would be off from the first step), or whose
    module cannot run the sampler's padded batch at all."""
    try:
        gap = probe_gap(engine)
    except (ValueError, RuntimeError, TypeError, AttributeError, IndexError) as exc:  # mlx-lm's module
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ConfigError(
            f"the mlx backend cannot run model_type {engine.model_type!r} (model {str(engine.model_dir)!r}): "
            f"mlx-lm's module fails on a padded probe batch as the sampler runs it "
            f"({type(exc).__name__}: {first[:200]})", field="model.path", fix=FIX) from None
    tolerance = PROBE_TOLERANCE.get(engine.config.dtype, PROBE_TOLERANCE_16BIT)
    if not gap <= tolerance:
        raise ConfigError(
            f"the mlx backend cannot score model_type {engine.model_type!r} exactly: its sampling (cached) "
            f"and scoring (full) forwards differ by {gap:.2e} in log-prob on a probe sequence "
            f"(model {str(engine.model_dir)!r})", field="model.path", fix=FIX)


#: Tested model types whose mlx-lm module does not apply the sliding window transformers applies
#: (module docstring); gemma3_text's does, as transformers does.
WINDOW_NOT_APPLIED = frozenset({"mistral", "phi3", "qwen2", "qwen3"})
#: transformers' default ``max_window_layers`` (Qwen2/Qwen3 configs): layers from it on slide
MAX_WINDOW_LAYERS = 28


def sliding_layers(config: Mapping[str, Any]) -> int:
    """How many layers transformers runs with ``config``'s ``sliding_window`` (when it is set).

    Mistral and Phi-3 slide every layer; Qwen2/Qwen3 only with ``use_sliding_window``, then the
    layers ``layer_types`` names, or those from ``max_window_layers`` on when it is absent."""
    layers = int(config.get("num_hidden_layers") or 0)
    if config.get("model_type") not in ("qwen2", "qwen3"):
        return layers
    if not config.get("use_sliding_window"):
        return 0
    types = config.get("layer_types")
    if isinstance(types, list):
        return sum(t == "sliding_attention" for t in types)
    first = int(config.get("max_window_layers", MAX_WINDOW_LAYERS))
    return max(0, layers - first)


def check_window_applied(engine: Any) -> None:
    """Refuse a sliding window mlx-lm's module would not apply (``WINDOW_NOT_APPLIED``) when it is
    shorter than ``model.max_length``: past it, transformers' attention and the MLX one differ."""
    config, max_length = engine.hf_config, int(engine.config.max_length)
    window = config.get("sliding_window")
    if engine.model_type not in WINDOW_NOT_APPLIED or _sliding_window_inert(window, {}, max_length):
        return
    if not sliding_layers(config):
        return
    raise ConfigError(
        f"mlx-lm's {engine.model_type!r} module does not apply sliding_window={window} from the config "
        f"of {str(engine.model_dir)!r} (transformers attends to the last {window} tokens only), and "
        f"model.max_length={max_length} is longer: the model would compute other log-probs than its "
        "checkpoint's", field="model.path",
        fix=f"set model.max_length to at most {window}, or use backend \"torch\", which applies the window")


def check_untested_family(engine: Any, tested: set[str] | frozenset[str]) -> None:
    """All three checks, for a model type not in ``tested`` (polyrl's tested list)."""
    if engine.model_type in tested:
        return
    check_config_read(engine)
    check_weights_consumed(engine)
    check_sampler_matches_scorer(engine)


def check_family(engine: Any, tested: set[str] | frozenset[str]) -> None:
    """What the engine runs when a model loads: the window check for every model type, and the
    checks of an untested one."""
    check_window_applied(engine)
    check_untested_family(engine, tested)
