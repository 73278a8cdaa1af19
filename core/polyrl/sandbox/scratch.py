"""The sample's folder on the host (the levels without a private tmpfs: ``off``, and ``unshare``
where the kernel refuses its mounts), made and removed so nothing the sample leaves in it acts
on the root trainer.

Why: the folder was ``mkdtemp``'s, chowned to the sample's uid and removed with ``shutil.rmtree``.
As its owner the sample could rename it away in the sticky ``/tmp`` and plant a FIFO (or a link
to one, or to a device) under its name: ``rmtree`` opens that top path without ``O_NOFOLLOW`` or
``O_DIRECTORY``, so the root trainer blocked in ``open`` for good. A tree nested past the
recursion limit made ``rmtree`` raise ``RecursionError`` out of ``Sandbox.run``: the uid was
never released and what the sample left ran on. Now the sample's home is ``HOME`` inside a
root-owned mode 0711 folder (it can neither rename nor replace it), removed whole through
descriptors, at any depth, never through a link, never opening what is not a folder
(``leftovers.remove_tree``).
"""

from __future__ import annotations

import os
import tempfile

from polyrl.sandbox import leftovers

#: The sample's home inside the trainer's folder: its cwd, HOME and TMPDIR.
HOME = "home"
PREFIX = "polyrl-sandbox-"


def make(ids: tuple[int, int] | None) -> tuple[str, str]:
    """(the trainer's folder, the sample's home in it, owned by ``ids`` where given, mode 0700).
    The folder is 0711: the sample may pass through it to its home but not list, rename or add
    to it."""
    folder = tempfile.mkdtemp(prefix=PREFIX)
    home = os.path.join(folder, HOME)
    try:
        os.chmod(folder, 0o711)
        os.mkdir(home, 0o700)
        if ids is not None:
            os.chown(home, *ids)
    except OSError:
        leftovers.remove_tree(folder)
        raise
    return folder, home
