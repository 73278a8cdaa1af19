"""pyarrow's compute layer set up before MAX runs a model.

Why: MAX's native libraries and pyarrow's ``libarrow`` both carry OpenTelemetry's C++ runtime
context singleton. Once MAX has run a model, pyarrow's first compute call (polyrl's check of a
Parquet/Arrow dataset, any 🤗 ``datasets`` filter, a user's own code in the same process) binds to
MAX's copy and the process dies with SIGSEGV in ``RuntimeContext::GetRuntimeContextStorage``. One
compute call before MAX loads anything makes arrow set up its own first; without pyarrow installed
there is nothing to do.
"""

from __future__ import annotations

import functools


@functools.cache
def set_up_arrow_first() -> None:
    """Run one pyarrow compute call, once per process, if pyarrow is installed."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        return
    pc.is_null(pa.array([None]))
