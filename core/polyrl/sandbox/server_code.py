"""The sample's server program, compiled once per interpreter instead of once per sample.

Why: ``python -c <values.py + server.py>`` made every sample's interpreter compile the same 47 KB
of source before it could answer, about 20 ms of CPU each (half of a trivial sample's start-up,
more than the interpreter's own). The trainer compiles it once for each interpreter it starts
samples with (a marshalled code object is only good for that interpreter's version) and sends it
down the sample's stdin ahead of the job; the sample's ``-c`` program is ``BOOTSTRAP``, which
reads exactly that many bytes and runs them. The code comes from the trainer, never from the
sample, and runs at the same place in the sample's start-up as the source did. Where compiling
in that interpreter fails (it is missing, or answers garbage), samples get the source as before.
"""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
import threading

#: The sample's ``-c`` program: read the 8-byte length, then the marshalled server, and run it as
#: ``__main__`` (where ``-c <source>`` ran it). No import beyond what the server imports itself.
BOOTSTRAP = (
    "import marshal, os\n"
    "def _polyrl_exactly(n):\n"
    "    data = b''\n"
    "    while len(data) < n:\n"
    "        chunk = os.read(0, n - len(data))\n"
    "        if not chunk:\n"
    "            raise SystemExit(1)\n"
    "        data += chunk\n"
    "    return data\n"
    "exec(marshal.loads(_polyrl_exactly(int.from_bytes(_polyrl_exactly(8), 'big'))))\n"
)

#: What the chosen interpreter runs once to compile the server (its source on stdin). ``optimize=0``
#: and ``dont_inherit``: as ``python -I -S -B -c`` compiles its program (no ``-O`` there).
_COMPILE = ("import marshal, sys\n"
            "sys.stdout.buffer.write(marshal.dumps(compile(sys.stdin.buffer.read().decode('utf-8'), '<string>', "
            "'exec', dont_inherit=True, optimize=0)))\n")

_compiled: dict[tuple[str, str], bytes | None] = {}
_lock = threading.Lock()


def framed(python: str, source: str) -> bytes | None:
    """``source`` compiled by ``python`` and marshalled, with its 8-byte big-endian length in
    front (what ``BOOTSTRAP`` reads); None where that interpreter cannot give it (then the
    caller passes the source with ``-c``). Cached per (interpreter, source)."""
    key = (python, source)
    with _lock:
        if key not in _compiled:
            blob = _compile(python, source)
            _compiled[key] = None if blob is None else len(blob).to_bytes(8, "big") + blob
        return _compiled[key]


def _compile(python: str, source: str) -> bytes | None:
    """The marshalled code object: here where ``python`` is this very interpreter, else from one run of it."""
    try:
        if os.path.realpath(python) == os.path.realpath(sys.executable):
            return marshal.dumps(compile(source, "<string>", "exec", dont_inherit=True, optimize=0))
        done = subprocess.run([python, "-I", "-S", "-c", _COMPILE], input=source.encode("utf-8"), capture_output=True,
                              timeout=60, cwd="/")
    except (OSError, subprocess.SubprocessError, ValueError, SyntaxError):
        return None
    if done.returncode != 0 or not done.stdout:
        return None
    return done.stdout
