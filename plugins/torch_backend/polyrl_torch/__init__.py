"""polyrl's PyTorch/transformers backend.

Importing this package is cheap and never imports torch: the registry loads ``polyrl_torch.plugin``
at startup, and torch is only imported when an engine is built (see ``plugin.py``).
"""

__all__: list[str] = []
