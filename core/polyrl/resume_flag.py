"""``--resume [PATH]`` of ``polyrl train`` and ``polyrl launch``: alone, the newest checkpoint of
``train.output_dir`` (kept as ""); with a path, that checkpoint.

Why an action of its own: with argparse's ``const=""`` an explicit blank path (``--resume "$CKPT"``
with ``CKPT`` unset or mistyped) was read as ``--resume`` alone, so the run resumed from the newest
checkpoint, or started afresh when there was none, instead of the one meant, without a word.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from polyrl.errors import ConfigError


class ResumeFlag(argparse.Action):
    """Stores "" for ``--resume`` alone and the path given otherwise; a blank path is refused."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", const=None, default=None, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if values is not None and not str(values).strip():
            raise ConfigError(f"names no checkpoint ({values!r}: an unset shell variable?)", field="--resume",
                              fix="give the checkpoint's path, or --resume alone for the newest checkpoint of "
                                  "train.output_dir")
        setattr(namespace, self.dest, "" if values is None else values)
