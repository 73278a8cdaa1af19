"""An audit hook for the forked copy of the trainer that runs a sample's tests.

Why: the tests are the dataset's code, but they compute on the sample's values, and some hand
those values to Python itself: ``pickle`` loading ``serialize(obj)`` or ``eval(to_expr(x))`` ran a
sample's bytes as code in the trainer's copy, outside every wall, as the trainer's user (root:
a file written anywhere; the copy reaches the trainer's descriptors and memory through
``/proc``, and could forge the verdict it sends back). In that copy this hook refuses, for the
rest of its short life:

- code the tests compile that they did not write: ``eval``/``exec``/``compile`` called from the
  tests (or ``setup``) on a source that is not in their own text, and code objects they make
  from bytes (``marshal.loads``, ``types.CodeType``); a library's own compiling (``namedtuple``,
  imports) is not the tests' call and goes on;
- unpickling any global but plain data types (``SAFE_GLOBALS``), where a pickle's code starts;
- what no test needs and a payload that got past the two above would: new processes, signals
  to other processes, network connections, native calls (ctypes), writing, removing or
  renaming files.

Python-level, so a defence in depth, not a wall: a path into the interpreter that no audit
event marks (a library compiling a string the tests pass it, ``timeit.timeit(f(x))``) is not
covered. Only the forked copy gets it (an audit hook cannot be removed): with ``tests_in =
"trainer"`` nothing of this runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

#: Filenames of the tests' steps, one per window of lines they are laid out in (``step_lines``).
WINDOW_FILES = ("<test>", *(f"<test {n}>" for n in range(2, 1001)))
#: Filenames of the tests' own code (``harness.run_tests`` compiles steps and setup under them).
TESTS_FILES = frozenset({"<setup>", *WINDOW_FILES})
#: Globals a pickle may name: plain data types, whose construction runs no code of the pickle's.
SAFE_GLOBALS = {
    "builtins": frozenset({"complex", "set", "frozenset", "bytearray", "bytes", "int", "float", "str", "list",
                           "tuple", "dict", "bool", "slice", "range", "object"}),
    "__builtin__": frozenset({"complex", "set", "frozenset", "bytearray", "bytes", "int", "float", "str", "list",
                              "tuple", "dict", "bool", "slice", "object"}),
    "collections": frozenset({"OrderedDict", "deque", "Counter", "defaultdict"}),
    "datetime": frozenset({"date", "datetime", "time", "timedelta", "timezone"}),
    "decimal": frozenset({"Decimal"}),
    "fractions": frozenset({"Fraction"}),
    "copyreg": frozenset({"_reconstructor"}),
    "_codecs": frozenset({"encode"}),
}
_DENIED = frozenset({"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                     "subprocess.Popen", "pty.spawn", "os.killpg", "socket.connect", "socket.bind",
                     "socket.sendto", "socket.sendmsg", "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle",
                     "ctypes.call_function", "os.remove", "os.rmdir", "os.rename", "os.link", "os.symlink",
                     "os.truncate", "os.chmod", "os.chown", "shutil.rmtree", "os.mkfifo", "os.mknod"})
#: Code objects made from bytes or parts: refused when the tests call them (an import's own
#: ``marshal.loads`` of a .pyc goes on).
_CODE_FROM_DATA = frozenset({"marshal.loads", "marshal.load", "code.__new__"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class TestsRefused(PermissionError):
    """Something the tests' copy of the trainer may not do (see the module doc)."""


def install(sources: Iterable[str]) -> None:
    """Add the hook to this process (the forked copy only: it stays until the process ends)."""
    own_text = "\n".join(sources)
    pid = os.getpid()
    getframe = sys._getframe

    def refuse(what: str) -> None:
        raise TestsRefused(f"code_tests: the tests may not {what} in the trainer (the sample's values reach it)")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "compile":
            if getframe(1).f_code.co_filename in TESTS_FILES and not _in_text(args[0] if args else None, own_text):
                refuse("compile code they did not write (eval/exec of a value)")
        elif event in _CODE_FROM_DATA:
            if getframe(1).f_code.co_filename in TESTS_FILES:
                refuse(f"make code from data ({event})")
        elif event == "pickle.find_class":
            module, name = (tuple(args) + ("", ""))[:2]
            if name not in SAFE_GLOBALS.get(str(module), ()):
                refuse(f"unpickle {str(module)[:60]}.{str(name)[:60]}")
        elif event == "open":
            mode, flags = (tuple(args) + (None, None, None))[1:3]
            if (isinstance(flags, int) and flags & _WRITE_FLAGS) or (isinstance(mode, str) and any(c in mode for c in "wax+")):
                if args[0] != os.devnull:
                    refuse("write files")
        elif event == "os.kill":
            if args and args[0] != pid:
                refuse("signal other processes")
        elif event in _DENIED:
            refuse(event)

    sys.addaudithook(hook)


def _in_text(source: Any, text: str) -> bool:
    """Whether ``source`` (a compile's str or bytes) is written in the tests' own text; an AST or
    anything else built at run time is not."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        try:
            source = bytes(source).decode("utf-8")
        except UnicodeDecodeError:
            return False
    return isinstance(source, str) and source.strip() in text
