"""polyrl's Modular MAX backend (generation and scoring; no training).

Importing this package is cheap and never imports ``max``: the registry loads
``polyrl_max.plugin`` at startup, and MAX is only imported when an engine is built.
"""

__all__: list[str] = []
