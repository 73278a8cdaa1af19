"""An ``async def`` solution under tests that await it, and a solution importing ``asyncio``.

Two false zeros on main: the audit hook (on by default) refused the import of
``_posixsubprocess``, which ``asyncio`` and ``subprocess`` import, so any solution importing
asyncio scored 0; and the coroutine a call returned stayed a handle in the tests, so
``asyncio.run(f(x))`` raised ValueError. Now ``_posixsubprocess`` is loaded before the hook with a
``fork_exec`` that refuses (``server._no_process_start``), and the sample runs a returned
coroutine to its end in a loop of its own (whose self-pipe is the one unix socket pair the hook
lets be made), the tests getting a coroutine giving its answer (``polyrl.sandbox.awaited_calls``).
The forged ones (a plain value passed off as awaited, a process started through the neutered
module or a fresh copy of it, a socket reaching out) score 0. Scored through the real reward path."""

from __future__ import annotations

import pytest
from test_sandbox_verdict import score

pytestmark = pytest.mark.faults

_RIGHT = ("import asyncio\nasync def add(a, b):\n    await asyncio.sleep(0.001)\n    if a < 0:\n"
          "        raise ValueError('negative')\n    return a + b\n"
          "class Calc:\n    async def twice(self, x):\n        return [x, x]\n")
_TESTS = {
    "asyncio_run": "import asyncio\nassert asyncio.run(add(1, 2)) == 3\n",
    "awaited_in_an_async_test": ("import pytest\n@pytest.mark.asyncio\nasync def test_add():\n"
                                 "    assert await add(2, 3) == 5\n"),
    "gathered": ("import asyncio\nasync def both():\n    return await asyncio.gather(add(1, 1), add(2, 2))\n"
                 "assert asyncio.run(both()) == [2, 4]\n"),
    "raises": "import asyncio, pytest\nwith pytest.raises(ValueError):\n    asyncio.run(add(-1, 0))\n",
    "method": "import asyncio\nassert asyncio.run(Calc().twice(4)) == [4, 4]\n",
}
#: A sync solution that only imports what imports ``_posixsubprocess``.
_IMPORTS = "import asyncio, subprocess\ndef add(a, b):\n    return a + b\n"

_ESCAPE = ("import os, socket, subprocess, sys, importlib.util\n"
           "def escape():\n    tries = [lambda: subprocess.run(['true']),\n"
           "             lambda: __import__('_posixsubprocess').fork_exec(*[None] * 23),\n"
           "             lambda: importlib.util.module_from_spec(importlib.util.find_spec('_posixsubprocess')),\n"
           "             lambda: (sys.modules.pop('_posixsubprocess'), __import__('_posixsubprocess')),\n"
           "             lambda: socket.socket(socket.AF_INET),\n"
           "             lambda: socket.socket(socket.AF_UNIX),\n"
           "             lambda: socket.socketpair(),\n"
           "             lambda: __import__('asyncio').new_event_loop()]\n"
           "    for i, t in enumerate(tries):\n        try:\n            t()\n        except PermissionError:\n"
           "            continue\n        except BaseException:\n            pass\n        return 'escaped %d' % i\n"
           "    return 'refused'\n")
#: Forged: a plain answer passed off as an awaited one; a route around the audit hook this could open
#: (a process through ``_posixsubprocess``, a socket of the sample's own, an event loop of its own).
_FORGED = {
    "sync_value_for_asyncio_run": ("def add(a, b):\n    return a + b\n", _TESTS["asyncio_run"]),
    "awaitable_object": ("class Later:\n    def __await__(self):\n        return iter([])\n"
                         "def add(a, b):\n    return Later()\n", _TESTS["asyncio_run"]),
    "escapes_the_audit_hook": (_ESCAPE, "assert escape().startswith('escaped')\n"),
}


def _scored(cases: dict[str, tuple[str, str]], isolation: str = "auto") -> dict[str, float]:
    """Each (solution, tests) case's score by its name, with the audit hook on (the default)."""
    rows = [{"prompt": "p", "tests": tests} for _, tests in cases.values()]
    result = score([code for code, _ in cases.values()], rows=rows, isolation=isolation, audit_hook=True)
    return dict(zip(cases, (float(x) for x in result.total)))


def test_an_async_solution_awaited_by_the_tests_passes():
    """Each scored 0 on main (``import asyncio`` refused; the coroutine a handle)."""
    cases = {name: (_RIGHT, tests) for name, tests in _TESTS.items()}
    cases["imports_asyncio_and_subprocess"] = (_IMPORTS, "assert add(1, 2) == 3\n")
    assert _scored(cases) == dict.fromkeys(cases, 1.0)


def test_forged_awaits_and_escapes_score_zero():
    """Without bubblewrap (``off``) the audit hook is the only wall: nothing this change lets
    through (the preloaded ``_posixsubprocess``, the awaited call's loop) starts a process or makes
    a socket of the sample's (whose buffers no rlimit counts)."""
    assert _scored(_FORGED, isolation="off") == dict.fromkeys(_FORGED, 0.0)
    assert _scored({"escape_refused": (_ESCAPE, "assert escape() == 'refused'\n")}, isolation="off") == \
        {"escape_refused": 1.0}
