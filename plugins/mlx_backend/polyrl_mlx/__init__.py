"""polyrl's MLX backend (Apple silicon, and Linux CPUs through ``mlx[cpu]``).

Importing this package is cheap and never imports MLX: the registry loads ``polyrl_mlx.plugin``
in every polyrl process. MLX is imported (after OpenBLAS is preloaded on Linux, see ``blas``)
only when an engine is built or a conversion runs.
"""

__all__: list[str] = []
