"""transformers' loading output held back until polyrl has judged the weights.

Why: ``from_pretrained`` logs its "LOAD REPORT" table (MISSING / UNEXPECTED / MISMATCH rows) and
draws a "Loading weights" bar on stderr before polyrl reads ``output_loading_info``; a folder
polyrl then refuses showed that table above the one ``error:`` line that says the same. Inside
``held_load_report`` the records transformers logs are kept and its progress bar is off: a block
that raises drops them (its error says what matters), one that succeeds replays them as they were,
so the warnings of a load polyrl accepts are unchanged.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

LIBRARY_LOGGER = "transformers"


class _Held(logging.Handler):
    """Keeps every record it is handed, in order."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _quiet_bar(factory: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return factory(*args, **{**kwargs, "disable": True})


@contextlib.contextmanager
def _no_progress_bar() -> Iterator[None]:
    """transformers' tqdm bars drawn as nothing for the block (its hook, restored after)."""
    from transformers.utils import logging as hf_logging

    set_hook = getattr(hf_logging, "set_tqdm_hook", None)
    if set_hook is not None:
        previous = set_hook(_quiet_bar)
        try:
            yield
        finally:
            set_hook(previous)
        return
    was_on = hf_logging.is_progress_bar_enabled()  # an older transformers: the global switch
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def held_load_report() -> Iterator[None]:
    """transformers' log records held for the block and its progress bar off: replayed through
    its own handlers when the block succeeds, dropped when it raises."""
    from transformers.utils import logging as hf_logging

    hf_logging.get_logger()  # its handler and level set up, as a load would
    logger = logging.getLogger(LIBRARY_LOGGER)
    held = _Held()
    handlers, propagate = list(logger.handlers), logger.propagate
    logger.handlers, logger.propagate = [held], False
    try:
        with _no_progress_bar():
            yield
    finally:
        logger.handlers, logger.propagate = handlers, propagate
    for record in held.records:  # reached only when the block succeeded
        logger.handle(record)
