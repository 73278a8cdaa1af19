"""Where torch runs: ``device = "auto"`` resolved once for the engine, the reward model and the
bench children alike, and the wait a CUDA clock read needs.

``auto`` is CUDA when torch sees a GPU, else the CPU (a recipe runs on a GPU box and a laptop
unchanged); a named device torch cannot use here is a ``ConfigError`` naming ``device`` and the fix.
"""

from __future__ import annotations

import torch

from polyrl.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"unknown device {name!r}", field="device", fix="use auto, cpu, cuda or cuda:N") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("cuda requested but torch sees no CUDA device", field="device",
                          fix="use device='cpu' or install a CUDA build of torch==2.13.0")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("mps requested but not available", field="device", fix="use device='cpu'")
    return device


def wait_for_device(device: torch.device) -> None:
    """Block until ``device`` has run what was queued on it: CUDA runs ahead of Python, so a phase
    clock read without this times the launches, not the work. A no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
