"""A pre-quantized model folder (GPTQ, AWQ, bitsandbytes, fp8...) as model.path: one error at startup.

Why: a folder whose config.json holds transformers' ``quantization_config`` (a ``quant_method``)
stores packed or low-precision weights that only that method's kernels read. polyrl's torch and
MAX backends train and sample over float weights, so such a folder failed only as the engine
loaded it (an ImportError for the quantization library, or its kernels' own error), after the
startup checks; ``polyrl.trl`` already refused a quantized model object and
``model_init_kwargs['quantization_config']``. mlx-lm's own 4/8-bit folders write no
``quant_method`` and pass; a backend declares the methods it loads (``Capabilities.quant_methods``).
Read from config.json alone: no backend import, no weights.
"""

from __future__ import annotations

from typing import Any

from polyrl.errors import ConfigError
from polyrl.model_config import config_tables

FIX = ("point it at the unquantized model it was made from (its model card names it; usually the repository "
       "name without -GPTQ, -AWQ, -bnb-4bit or -FP8), in float32, bfloat16 or float16; for QLoRA's memory "
       "saving, train a [lora] adapter over that base")


def quantization_of(model_path: str) -> dict[str, Any] | None:
    """The ``quantization_config`` of ``model_path``'s config.json (or its ``text_config``) that
    names a ``quant_method``; None for a float model, an MLX-quantized one, a GGUF file or a name."""
    for table in config_tables(model_path):
        quantization = table.get("quantization_config")
        if isinstance(quantization, dict) and quantization.get("quant_method") is not None:
            return quantization
    return None


def refuse_prequantized(model_path: str, backend: str, accepted: tuple[str, ...], role: str,
                        field: str = "model.path", shown_as: str | None = None) -> None:
    """One ``ConfigError`` on ``field`` when ``model_path`` is pre-quantized by a method backend
    ``backend`` (which runs ``role``) does not declare in ``accepted``."""
    quantization = quantization_of(model_path)
    if quantization is None or str(quantization["quant_method"]).lower() in accepted:
        return
    from polyrl.trl_quantized import describe

    raise ConfigError(f"model {shown_as or model_path!r} is pre-quantized ({describe(quantization)}: config.json's "
                      f"quantization_config); backend {backend!r} cannot {role} over quantized weights, only over "
                      "float32, bfloat16 or float16 ones", field=field, fix=FIX)
