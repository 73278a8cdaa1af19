"""Which model architectures MAX 26.7 generates for, with which encodings, on which devices.

Read from the installed ``max.pipelines`` architecture registry (each ``SupportedArchitecture``'s
``supported_encodings``) for the decoder families polyrl targets, and written down here so the
plugin can declare it without importing MAX (seconds) and refuse an unsupported model *before*
MAX compiles for minutes. ``tests/test_max_architectures.py`` checks this table against the
installed registry, so a MAX upgrade that changes it fails loudly.

MAX refuses ``bfloat16`` on CPU, so an architecture whose only encoding is ``bfloat16`` (Mistral,
Gemma 3 in 26.7) runs on a GPU only; Qwen3 declares float32 but its layers need an accelerator
(measured: the CPU load fails in ``max.nn.comm.Allreduce``). The log-prob deviations are measured by
``test_max_equals_torch_and_takes_pushed_weights`` (tiny random models, greedy and sampled
tokens, max |MAX - torch float32| per token).
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs

from polyrl.backend_kit.model_folders import foreign_code_error
from polyrl.errors import ConfigError


@attrs.define(frozen=True)
class MaxArchitecture:
    """One architecture as MAX's pipeline registry declares it."""

    hf_class: str  # the ``architectures[0]`` entry of config.json MAX dispatches on
    encodings: tuple[str, ...]  # float encodings MAX accepts (quantized ones listed apart)
    quantized: tuple[str, ...] = ()
    #: MAX's CPU path works (False where the pipeline needs an accelerator whatever the encoding)
    cpu: bool = True
    #: measured max |log-prob(MAX) - log-prob(torch float32)| on CPU; None = not measured here
    logprob_deviation: float | None = None
    notes: str = ""

    def devices(self) -> tuple[str, ...]:
        return ("cpu", "gpu") if self.runs_on_cpu else ("gpu",)

    @property
    def runs_on_cpu(self) -> bool:
        return self.cpu and "float32" in self.encodings


#: model_type (config.json) -> what MAX 26.7 runs. Exhaustive for polyrl: others are refused.
MAX_ARCHITECTURES: dict[str, MaxArchitecture] = {
    "llama": MaxArchitecture("LlamaForCausalLM", ("float32", "bfloat16"),
                             quantized=("q4_0", "q4_k", "q6_k"), logprob_deviation=1.4e-6,
                             notes="also GGUF files of one quantisation type"),
    "qwen2": MaxArchitecture("Qwen2ForCausalLM", ("float32", "bfloat16"), logprob_deviation=4.8e-7),
    "qwen3": MaxArchitecture("Qwen3ForCausalLM", ("float32", "bfloat16"), cpu=False,
                             notes="MAX 26.7's Qwen3 layers build an Allreduce over accelerators even "
                                   "for one device, so its pipeline fails on CPU: GPU only"),
    "phi3": MaxArchitecture("Phi3ForCausalLM", ("float32", "bfloat16"), logprob_deviation=4.8e-7),
    "mistral": MaxArchitecture("MistralForCausalLM", ("bfloat16",),
                               notes="MAX 26.7 declares bfloat16 only: GPU only"),
    "gemma3_text": MaxArchitecture("Gemma3ForCausalLM", ("bfloat16",),
                                   notes="MAX 26.7 declares bfloat16 only: GPU only"),
}


def cpu_float32_architectures() -> list[str]:
    """model_types MAX runs on CPU (float32)."""
    return [t for t, a in MAX_ARCHITECTURES.items() if a.runs_on_cpu]


def describe() -> str:
    """One line for ``polyrl doctor``: each architecture with where it runs."""
    return "; ".join(f"{t} ({'cpu float32, ' if a.runs_on_cpu else ''}gpu "
                     f"{'/'.join(a.encodings)})" for t, a in MAX_ARCHITECTURES.items())


def capability_table() -> dict[str, dict]:
    """model_type -> the fields of ``polyrl.types.ArchSupport`` (generate, train, deviation,
    notes), for the core's per-architecture capability table."""
    return {t: {"generate": True, "train": False, "logprob_deviation": a.logprob_deviation,
                "devices": a.devices(),
                "notes": f"encodings: "
                         f"{', '.join(a.encodings + a.quantized)}" + (f"; {a.notes}" if a.notes else "")}
            for t, a in MAX_ARCHITECTURES.items()}


def read_architecture(model_dir: Path) -> tuple[str | None, str | None]:
    """(model_type, architectures[0]) of a model folder's config.json; Nones when unreadable."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None, None
    classes = config.get("architectures") or [None]
    return config.get("model_type"), classes[0]


def check_architecture(model_dir: Path, encoding: str | None, device_kind: str,
                       encoding_field: str = "dtype") -> MaxArchitecture | None:
    """Refuse, before MAX compiles anything, a model MAX cannot run with this encoding/device.

    ``encoding`` None means "from the GGUF file" (already resolved and checked by the caller);
    ``encoding_field`` is the setting it came from (``dtype``, or the explicit
    ``backends.options.quantization_encoding``), named by the error.
    Returns the architecture entry, or None for a folder without a readable config (MAX reports).
    """
    model_type, hf_class = read_architecture(model_dir)
    if model_type is None and hf_class is None:
        return None
    arch = MAX_ARCHITECTURES.get(model_type or "")
    foreign = foreign_code_error(model_dir, "max", "model") if arch is None else None
    if foreign is not None:  # auto_map's own code builds it: torch alone runs that
        raise foreign
    if arch is None or (hf_class is not None and hf_class != arch.hf_class):
        able = ", ".join(f"{t} ({a.hf_class})" for t, a in MAX_ARCHITECTURES.items())
        raise ConfigError(
            f"the max backend does not run {hf_class or model_type!r} (model_type {model_type!r}); "
            f"it runs {able}", field="model",
            fix="generate with the torch or mlx backend ([backends] generate = \"torch\"), or use a "
                "model of a supported architecture")
    if device_kind == "cpu" and not arch.runs_on_cpu:
        why = arch.notes or "it needs bfloat16, which MAX runs on a GPU only"  # notes say why
        raise ConfigError(
            f"MAX runs {arch.hf_class} on a GPU only ({why}) and this run asks for the CPU",
            field="device",
            fix="run it with device = \"gpu\" where MAX supports the GPU, or generate with the torch "
                "backend on CPU ([backends] generate = \"torch\")")
    if encoding is None:
        return arch
    if encoding not in arch.encodings + arch.quantized:
        raise ConfigError(
            f"MAX runs {arch.hf_class} only as {', '.join(arch.encodings + arch.quantized)}, "
            f"not {encoding}", field=encoding_field,
            fix=(f"set dtype to one of {', '.join(arch.encodings)}" if encoding_field == "dtype" else
                 f"set quantization_encoding to one of {', '.join(arch.encodings + arch.quantized)}, "
                 "or remove it to follow dtype"))
    return arch
