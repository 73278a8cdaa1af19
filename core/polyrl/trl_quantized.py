"""A TRL script's QLoRA (a quantized base under a LoRA adapter): one error naming what to do.

Why: TRL trains LoRA over a bitsandbytes-quantized base (a ``PeftModel`` of a model loaded with
``quantization_config``, or ``model_init_kwargs={"quantization_config": ...}`` with
``peft_config``). polyrl's backends train LoRA over the base in its float dtype. A quantized
model object was saved as given and failed only at ``train()``, deep in the engine's load (an
ImportError without bitsandbytes); the ``model_init_kwargs`` one was refused with the whole
quantization config dumped over several lines and no word on what to do instead.
"""

from __future__ import annotations

from typing import Any

from polyrl.errors import ConfigError

#: what a QLoRA script does instead: the same adapter over the unquantized base
FIX = ('load the base without quantization_config, in a float dtype (e.g. model_init_kwargs={"dtype": "bfloat16"}, '
       "or from_pretrained(..., dtype=torch.bfloat16)), and keep peft_config or the PeftModel: polyrl trains the same "
       "LoRA adapter over it (about 2 bytes per base parameter in bfloat16, not 0.5)")


def describe(quantization: Any) -> str:
    """``bitsandbytes 4-bit`` for a transformers quantization config (object or dict)."""
    def get(key: str) -> Any:
        return quantization.get(key) if isinstance(quantization, dict) else getattr(quantization, key, None)

    method = get("quant_method")
    method = str(getattr(method, "value", method) or type(quantization).__name__)
    bits = "4-bit" if get("load_in_4bit") else "8-bit" if get("load_in_8bit") else \
        f"{get('bits')}-bit" if get("bits") else ""
    return f"{method} {bits}".strip()


def quantization_of(model: Any) -> Any:
    """The quantization config of a transformers model object (a PeftModel's base), else None."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base, "hf_quantizer", None) is not None:
        return getattr(base.hf_quantizer, "quantization_config", None) or {"quant_method": "quantized"}
    if getattr(base, "is_loaded_in_4bit", False) or getattr(base, "is_loaded_in_8bit", False):
        return {"quant_method": "bitsandbytes", "load_in_4bit": getattr(base, "is_loaded_in_4bit", False),
                "load_in_8bit": getattr(base, "is_loaded_in_8bit", False)}
    return getattr(getattr(base, "config", None), "quantization_config", None)


def refuse_quantized_model(model: Any) -> None:
    """One ``ConfigError`` on ``model`` for a quantized model object (QLoRA's base)."""
    if isinstance(model, (str, bytes)) or (quantization := quantization_of(model)) is None:
        return
    raise ConfigError(f"model is quantized ({describe(quantization)}: a QLoRA base); polyrl trains LoRA over a "
                      "base in float32, bfloat16 or float16, not over quantized weights", field="model", fix=FIX)


def refuse_quantization_config(value: Any, field: str) -> None:
    """One ``ConfigError`` on ``field`` for ``model_init_kwargs['quantization_config']``."""
    raise ConfigError(f"model_init_kwargs['quantization_config'] asks for a quantized base ({describe(value)}: "
                      "QLoRA); polyrl trains LoRA over a base in float32, bfloat16 or float16", field=field, fix=FIX)
